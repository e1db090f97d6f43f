"""lint.py on historical bug fixes: for each (repository, fix commit, file, rule) of CASES, the file as it was just
before the fix (the commit's parent) and as the fix left it are linted; a case is caught when the parent has more
findings of that rule than the fix, silent otherwise. (Not run in CI.)

    python benchmarks/lint_history.py MIRRORS [--candidates OWNER/NAME SHA...]

MIRRORS is a folder of git directories laid out as the `fetch` tool leaves them, MIRRORS/<owner>+<name>/repo
(full history): the code is read with `git show`, linted in this process from memory, and never enters this
repository. A case whose bug spans files (a controller in one, the trainer it drives in another) names the other
files too: each version's files are then written to a temporary folder outside the repository and linted as one
run, the way `lint.py FOLDER` would see them. The cases are commits whose message or diff says what they fix, each read by a person before it was
listed (`why`); a rule's count dropping in an unrelated rewrite would not be a catch, so a commit is listed only
when fixing that bug is what it does. With --candidates, the rules whose count drops in each changed .py file of
the given commits are printed instead: how new cases are found (search a repository's log for a fix, then try it).

The figures are counts of cases, not times, and do not depend on the machine.
"""
import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "diagnostics"))

from trainlint.run import Project, lint_source, notebook_source  # noqa: E402

# (repository, fix commit, file, rule whose finding on the parent the fix removes, what was wrong[, other files of
# the commit's tree linted with it])
CASES = [
    ("huggingface/diffusers", "1b1d6444c69d8a8a9f037500bc54da735fd547d5",
     "examples/unconditional_image_generation/train_unconditional.py", "accumulate-without-steps",
     "accelerator.accumulate() with no gradient_accumulation_steps given to Accelerator (#308)"),
    ("huggingface/diffusers", "14f4af8f5b9b2c097f3ce9cc082525e03d49e318", "examples/dreambooth/train_dreambooth.py",
     "clip-every-micro-batch", "gradients clipped on every accumulation micro-step (#686)"),
    ("huggingface/diffusers", "14b97549230ce4a40c0775e075a11c3891dc0446",
     "examples/unconditional_image_generation/train_unconditional.py", "clip-every-micro-batch",
     "gradients clipped on every accumulation micro-step (#721)"),
    ("lucidrains/denoising-diffusion-pytorch", "698227ae13c196b465506fdc8f84a5711459e800",
     "denoising_diffusion_pytorch/denoising_diffusion_pytorch.py", "accumulated-loss-not-scaled",
     "the loss of each accumulated micro-batch not divided by the number of steps"),
    ("pytorch/torchtitan", "da230bbb205cd60ea30d485cb359bed2830adb84", "torchtitan/experiments/rl/grpo.py",
     "zero-grad-every-micro-batch", "zero_grad on every micro-batch (#3575): the trainer actor's forward_backward "
     "zeroes, the controller calls it per micro-batch, then optim_step", ("torchtitan/experiments/rl/actors/trainer.py",)),
    ("pytorch/examples", "c053f31a0577517c85136faf41802598d551a519", "mnist/main.py", "dropout-missing-training",
     "F.dropout without training=self.training: dropout still on at test time"),
    ("Cuber-Wei/Fast-SCNN-pytorch-for-Silicon-M", "e0c8148563aafc713e2199ac07d732c9792013fa", "train.py",
     "eval-mode-not-restored", "model.train() once before the epochs, validation leaves the model in eval mode"),
    ("yunjey/pytorch-tutorial", "20aed908f24c3b79b67facf187ef580e1ef7c232",
     "tutorials/02-intermediate/deep_residual_network/main.py", "eval-mode-missing",
     "a trained ResNet (batch norm) tested without resnet.eval()"),
    ("udacity/deep-learning-v2-pytorch", "b5c2c2fc49baa0bffc2787a4263f02552af0e3ec",
     "convolutional-neural-networks/mnist-mlp/mnist_mlp_solution.ipynb", "eval-mode-missing",
     "an MLP with dropout tested without model.eval() (the same fix in three more notebooks)"),
    ("udacity/deep-learning-v2-pytorch", "9a4dbeca", "weight-initialization/helpers.py", "eval-mode-missing",
     "validation without model.eval() in a helper; the models come from notebooks, so lint cannot see their layers"),
    ("udacity/deep-learning-v2-pytorch", "e8eec7d1a0", "sentiment-rnn/Sentiment_RNN_Solution.ipynb",
     "train-loader-no-shuffle", "the training DataLoader built without shuffle=True"),
    ("udacity/deep-learning-v2-pytorch", "c0f521637d", "transfer-learning/Transfer_Learning_Solution.ipynb",
     "optimizer-param-subset", "`param.require_grad = False` (a typo): VGG's features never frozen, only the "
     "classifier optimised, gradients computed for all of it"),
    ("rasbt/deeplearning-models", "936d53db3ec240700b4055ed461c928c87e09546",
     "pytorch-lightning_ipynb/cnn/cnn-vgg19.ipynb", "eval-without-no-grad",
     "a confusion matrix computed in eval mode with autograd on (the same fix in three more notebooks)"),
    ("rasbt/deeplearning-models", "51e549597ba225e377bb4e9dca9a48ad65763abb",
     "pytorch-lightning_ipynb/cnn/cnn-vgg16.ipynb", "eval-without-no-grad",
     "evaluation with autograd on, fixed \"to reduce memory consumption\" (six more notebooks)"),
    ("rasbt/deeplearning-models", "3bbf99c7ae0ae38f52c5baabdfe27b57fd2a5cdb", "pytorch-lightning_ipynb/mlp/mlp-dropout.ipynb",
     "eval-without-no-grad", "the final evaluation loop with autograd on (ten more notebooks)"),
    ("sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning", "ca674e1f6ab81779d97cccc3854556d0e9f138c5", "train.py",
     "eval-without-no-grad", "validation of the encoder and decoder with autograd on (issue #57)"),
    ("weiaicunzai/pytorch-cifar100", "a0ef4128b6314dd8025f9edc0f17ea5381700514", "test.py", "eval-without-no-grad",
     "the test loop with autograd on, fixed \"to reduce memory consumption and computations\""),
    ("eriklindernoren/PyTorch-YOLOv3", "6fe90105be83fda60221bb381428db72643e9064", "test.py", "eval-without-no-grad",
     "evaluation with autograd on (detect.py too)"),
    ("eriklindernoren/PyTorch-YOLOv3", "2ee8ac1546400645908b61ef015cdf5d71aa34cc", "train.py", "train-loader-no-shuffle",
     "the training DataLoader with shuffle=False"),
    ("eriklindernoren/PyTorch-YOLOv3", "65486c48b3af877fdfdb089eea37117c6afeb4fd", "train.py",
     "accumulation-step-inverted", "`if batches_done % opt.gradient_accumulations:` stepped on k-1 of every k batches"),
    ("Shawn1993/cnn-text-classification-pytorch", "5e11c712d34bfc105931678168443d393e31a37c", "train.py",
     "eval-mode-not-restored", "model.train() once before the loop; the periodic evaluation leaves the model in eval mode"),
    # Round 3 (2026-11-27): 16 fixes of 14 repositories not used before, each read and listed before it was linted
    ("sthalles/SimCLR", "af77a03f0b66f52ee4fdb75d55a04eea8bfcc8cc", "train.py", "missing-zero-grad",
     "the SimCLR training loop stepped the optimizer without ever zeroing the gradients (\"fixed bug missing zero_grad()\")"),
    ("kuangliu/pytorch-cifar", "b1cf0f1d5c22ad42640e0d269ba0041ca4d29a21", "main.py", "eval-without-no-grad",
     "test() ran the network over the test set in eval mode with autograd on"),
    ("eriklindernoren/PyTorch-GAN", "c80d8bc1951cd8c6fb1856314f38d143a271f1f4", "implementations/acgan/acgan.py",
     "softmax-into-ce", "the ACGAN discriminator's class head ended in nn.Softmax() and fed CrossEntropyLoss"),
    ("clovaai/deep-text-recognition-benchmark", "7498f48452c48cbd504e536e24534a0031d85766", "demo.py",
     "eval-without-no-grad", "the demo's no_grad block covered only the input tensors; the model's forward ran after "
     "it with autograd on (test.py and train.py of the commit only swap requires_grad=False for no_grad)"),
    ("wenet-e2e/wekws", "141d40704f33bd87805b3010548390592aab58c2", "kws/utils/executor.py", "missing-zero-grad",
     "the keyword-spotting executor's training loop never called optimizer.zero_grad() (#72, #73)"),
    ("wkentaro/pytorch-fcn", "d10dd3062824195fe5cc9d196b4af4081247bb3f", "torchfcn/trainer.py",
     "eval-mode-not-restored", "validate() runs mid-epoch and set eval mode; model.train() only at the start of each "
     "epoch, so the rest of the epoch trained in eval mode (PR #56)"),
    ("yastrebksv/TennisCourtDetector", "e5cd4f1ce26b15361700d3d89e068cbf0e82749e", "base_trainer.py",
     "missing-zero-grad", "train() stepped the optimizer with no zero_grad, gradients summed over all iterations (issue #7)"),
    ("Hsintien-Ng/idinvert_pytorch-reproduced", "cf3302510573138cf16202add06feae7c93624ea",
     "training/training_loop_encoder.py", "missing-zero-grad",
     "the discriminator's optimizer_D was never zeroed before D_loss.backward() (issue #1)"),
    ("danielkelshaw/ConcreteDropout", "0b8ecad05342d8b8feedadff3c0b7e8a7e3eb0ec", "mnist_example.py", "softmax-into-ce",
     "the MLP's last layer was nn.Sequential(fc4, softmax) and its output went to F.cross_entropy (issue #11)"),
    ("vinhkhuc/PyTorch-Mini-Tutorials", "f32192e649d71d49f2ee5169cede28260147026f", "2_logistic_regression.py",
     "softmax-into-ce", "a Sequential model ending in torch.nn.Softmax() fed CrossEntropyLoss (issue #1; the same fix "
     "in three more scripts)"),
    ("karpathy/nanoGPT", "553f949f46e04a946e5ff2da6e4bb70a221ea1fc", "train.py", "accumulated-loss-not-scaled",
     "the loss of each micro-step of gradient accumulation went to backward() undivided (#168): clipping saw the sum"),
    ("samuelyu2002/ImVisible", "e536e5e1cd634e481c30709dd196482c3abdfdb9", "Model/training.py",
     "loss-accumulated-with-graph", "running_loss += loss (and the MSE and CE terms) kept every batch's graph (issue #2)"),
    ("fredzzhang/atlas", "41718b10242e1b40fd30005be3ccc3d58f11e8b1", "src/finetune.py", "accumulated-loss-not-scaled",
     "the fine-tuning loss went to backward() undivided while the step came once per num_grad_accumulation batches (#26)"),
    ("fredzzhang/atlas", "41718b10242e1b40fd30005be3ccc3d58f11e8b1", "src/learn_task_addition.py",
     "accumulated-loss-not-scaled", "the same undivided accumulated loss, here `loss = sum(all_losses)` of a list of "
     "per-dataset losses (#26)"),
    ("ThilinaRajapakse/pytorch-transformers-classification", "c94585b02e5c15f73f47b4f2f81b82e188d118e4",
     "run_model.ipynb", "scheduler-before-optimizer", "scheduler.step() came before optimizer.step() in the training loop"),
    ("aidotse/LeakPro", "feaecdaf04a1bc5dd06beae1cacf212d809eef70", "examples/mia/cifar/cifar_handler.py",
     "loss-average-mismatch", "a sum of per-batch mean losses divided by the number of samples; the fix weights each "
     "by the batch size"),
]


def git(gitdir, *args):
    done = subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, text=True, errors="replace")
    return done.stdout if done.returncode == 0 else None


def rules_in(text, path, project=None):
    """Counter of rule ids lint finds in one file's text (a notebook's cells when path ends in .ipynb); None when
    it is not Python 3. project: the Project of the run the file is linted in."""
    try:
        source = notebook_source(text)[0] if path.endswith(".ipynb") else text
        return Counter(f.rule for f in lint_source(source, path, project=project))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def version(gitdir, rev, path, context):
    """The rules lint finds in path at rev, linted with the context files of that tree when there are any."""
    text = git(gitdir, "show", f"{rev}:{path}")
    if text is None or not context:
        return None if text is None else rules_in(text, path)
    with tempfile.TemporaryDirectory() as folder:
        files = []
        for name in (path, *context):
            other = git(gitdir, "show", f"{rev}:{name}")
            if other is None:
                return None
            files.append(Path(folder, name))
            files[-1].parent.mkdir(parents=True, exist_ok=True)
            files[-1].write_text(other)
        return rules_in(text, str(files[0]), Project(files))


def before_after(gitdir, sha, path, context=()):
    """(rules on the parent, rules on the fix) of one file, or None when either version is missing or unreadable."""
    found = version(gitdir, f"{sha}^", path, context), version(gitdir, sha, path, context)
    return found if None not in found else None


def mirror(root, repo):
    """The repository's git directory: MIRRORS/<owner>+<name>/repo, or the .git inside it when fetch left a checkout."""
    gitdir = root / repo.replace("/", "+") / "repo"
    return gitdir / ".git" if (gitdir / ".git").is_dir() else gitdir


def candidates(root, repo, shas):
    gitdir = mirror(root, repo)
    for sha in shas:
        subject = (git(gitdir, "log", "-1", "--format=%s", sha) or "").strip()
        for path in (git(gitdir, "diff", "--name-only", f"{sha}^", sha) or "").split():
            if path.endswith((".py", ".ipynb")):
                pair = before_after(gitdir, sha, path)
                drops = {r: n - pair[1][r] for r, n in pair[0].items() if n > pair[1][r]} if pair else {}
                if drops:
                    print(f"{repo} {sha[:10]} {path}: {drops}  ({subject})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", type=Path)
    parser.add_argument("--candidates", nargs="+", metavar="OWNER/NAME SHA")
    args = parser.parse_args()
    if args.candidates:
        candidates(args.mirrors, args.candidates[0], args.candidates[1:])
        return
    tally = Counter()
    print("| repository | fix | file | rule | what was wrong | parent | fix | verdict |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    for repo, sha, path, rule_id, why, *context in CASES:
        pair = before_after(mirror(args.mirrors, repo), sha, path, *context)
        verdict = "not in the mirrors" if pair is None else "caught" if pair[0][rule_id] > pair[1][rule_id] else "silent"
        tally[verdict] += 1
        counts = f"{pair[0][rule_id]} | {pair[1][rule_id]}" if pair else "- | -"
        print(f"| {repo} | {sha[:10]} | {path} | {rule_id} | {why} | {counts} | {verdict} |")
    print(f"\ncaught {tally['caught']} of {len(CASES)}; silent {tally['silent']}; not in the mirrors {tally['not in the mirrors']}")


if __name__ == "__main__":
    main()
