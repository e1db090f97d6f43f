"""The corpus: real public training scripts, pinned, with how to run each at a tiny CPU config and what to expect.

Per entry (validate() checks the shape):
    name        short name (--only NAME)
    repo        GitHub owner/name; its snapshot comes from the `fetch` tool (github:owner/name)
    commit      the pinned commit the files are read at
    files       paths in the repository laid out at the same paths in a temp folder: the script and what it imports
    script      the one the doctor runs (one of files)
    cwd         working folder, relative to the repository root (default: the script's folder)
    args        the script's command-line arguments for a tiny CPU run
    data        a data maker (datamakers.py): writes the tiny local data the script reads, relative to cwd
    user_files  files of "the user's" planted (1 MB each, relative to cwd) where the script would save: a changed or
                removed one is a SAFETY failure
    env         environment variables the script needs on today's torch (each with a comment saying why)
    packages    what the script needs beyond torch, transformers, lightning and the scientific stack (README: install)
    warn        {check id: reason}: a WARN the healthy script deserves; any other WARN is false
    bug         a real bug of the script itself (not planted): {"why": ..., "checks": [ids]}: a FAIL of one of those
                checks shows it (true, and expected); other FAILs are false. Empty checks: no check here catches it yet
    exit        the doctor's expected exit code when it is 2 (the script never steps: nothing to judge), with why
    twins       planted bugs: {file, find, replace, check}: `find` must occur exactly once in `file`; `replace`
                carries a `# BUG:` comment; `check` must FAIL on the patched script
"""
import datamakers

EXAMPLES = ("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8")
LIGHTNING = ("Lightning-AI/pytorch-lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414")
TORCHVISION = ["torchvision==0.28.0"]
GYM = ["gymnasium==1.4.0"]
JSONARGPARSE = ["jsonargparse==4.53.0", "docstring-parser", "typeshed-client"]  # LightningCLI
LIGHTNING_CLI_ARGS = ["--trainer.max_epochs=1", "--trainer.accelerator=cpu", "--data.batch_size=16"]
WLM = ["word_language_model/main.py", "word_language_model/data.py", "word_language_model/model.py"]
WLM_ARGS = ["--emsize", "16", "--nhid", "16", "--nlayers", "1", "--bptt", "8", "--batch_size", "4", "--epochs", "1",
            "--nhead", "2", "--dropout", "0.0"]
MNIST_ARGS = ["--batch-size", "16", "--test-batch-size", "16", "--epochs", "1"]
FABRIC_ARGS = ["--batch-size", "16", "--epochs", "1"]  # no --test-batch-size there
LAZY_TENSORS = {"registration": "true as stated: src_mask (and the Lightning demo's pos_encoder.pe) are plain tensor "
                                "attributes built on the first input's device; a model moved after a forward keeps them "
                                "behind"}
DEMO_TRANSFORMER_BUG = {
    "why": "lightning.pytorch.demos.Transformer is fed the targets (model(input, target)): each position sees its own "
           "answer (issue 21: on fresh random tokens its loss falls to 1.1 against ln V = 3.9); also its positional "
           "encoding adds one position's vector to every position (self.pe[:, x.size(1)] for self.pe[:, :x.size(1)])",
    "checks": ["target_leak"]}  # the first bug; the positional one no check here shows yet
LSTM_LR_TWIN = {"file": "word_language_model/main.py", "find": "torch.optim.AdamW(model.parameters(), lr=args.lr)",
                "replace": "torch.optim.AdamW(model.parameters(), lr=args.lr * 1000)  # BUG: the lr is 1000x too big",
                "check": "update_ratio"}

ENTRIES = [
    dict(name="nanogpt", repo="karpathy/nanoGPT", commit="3adf61e154c3fe3fca428ad6bc3818b27a3b8291",
         files=["train.py", "model.py", "configurator.py"], script="train.py",
         args=["--dataset=shakespeare_char", "--device=cpu", "--compile=False", "--dtype=float32", "--batch_size=8",
               "--block_size=32", "--n_layer=2", "--n_head=2", "--n_embd=32", "--gradient_accumulation_steps=2",
               "--eval_iters=2", "--max_iters=20", "--lr_decay_iters=20"],
         data=datamakers.nanogpt_shakespeare_char, user_files=["out/ckpt.pt"],
         twins=[{"file": "model.py", "find": "is_causal=True)",
                 "replace": "is_causal=False)  # BUG: attention sees the future", "check": "causal_dependency"}]),
    dict(name="mingpt_chargpt", repo="karpathy/minGPT", commit="37baab71b9abea1b76ab957409a1cc2fbfba8a26",
         files=["projects/chargpt/chargpt.py", "mingpt/__init__.py", "mingpt/model.py", "mingpt/trainer.py",
                "mingpt/utils.py", "mingpt/bpe.py"],
         script="projects/chargpt/chargpt.py", cwd=".",
         args=["--model.model_type=None", "--model.n_layer=2", "--model.n_head=2", "--model.n_embd=32",
               "--data.block_size=32", "--trainer.batch_size=8", "--trainer.num_workers=0", "--trainer.device=cpu"],
         data=datamakers.input_txt, user_files=["out/chargpt/config.json", "out/chargpt/args.txt"],
         twins=[{"file": "mingpt/model.py", "find": "att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))",
                 "replace": "att = att  # BUG: the causal mask is gone", "check": "causal_dependency"}]),
    dict(name="makemore", repo="karpathy/makemore", commit="988aa59e4d8fefa526d06f3b453ad116258398d4",
         files=["makemore.py"], script="makemore.py",
         args=["-i", "names.txt", "-o", "out", "--num-workers", "0", "--max-steps", "20", "--n-layer", "2",
               "--n-head", "2", "--n-embd", "32", "--n-embd2", "32", "--batch-size", "16"],
         data=datamakers.names_txt, user_files=["out/model.pt"],
         warn={"overfit_one_batch": "true as stated: every word starts from the same token and goes on with a different "
                                    "first letter, so no model memorises the batch; the control memorises the model's own "
                                    "predictions, so nothing is broken"},
         twins=[{"file": "makemore.py", "find": "att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))",
                 "replace": "att = att  # BUG: the causal mask is gone", "check": "causal_dependency"}]),
    dict(name="ngvideo_bigram", repo="karpathy/ng-video-lecture", commit="52201428ed7b46804849dea0b3ccf0de9df1a5c3",
         files=["bigram.py"], script="bigram.py", args=[], data=datamakers.input_txt,
         warn={"overfit_one_batch": "true as stated: a bigram sees one token, and the same token goes on with different "
                                    "next tokens in the batch; it memorises its own predictions, so nothing is broken"},
         twins=[{"file": "bigram.py", "find": "logits = self.token_embedding_table(idx)",
                 "replace": "logits = self.token_embedding_table(idx * 0)  # BUG: every token looked up as token 0",
                 "check": "input_dependence"}]),
    dict(name="wlm_lstm", repo=EXAMPLES[0], commit=EXAMPLES[1], files=WLM, script="word_language_model/main.py",
         args=WLM_ARGS + ["--use-optimizer", "--lr", "1e-3"], data=datamakers.wikitext2_folder, user_files=["model.pt"],
         twins=[LSTM_LR_TWIN]),
    dict(name="wlm_transformer", repo=EXAMPLES[0], commit=EXAMPLES[1], files=WLM, script="word_language_model/main.py",
         args=WLM_ARGS + ["--model", "Transformer", "--use-optimizer", "--lr", "1e-3"],
         data=datamakers.wikitext2_folder, user_files=["model.pt"], warn=LAZY_TENSORS,
         twins=[{"file": "word_language_model/model.py", "find": "output = self.encoder(src, mask=self.src_mask)",
                 "replace": "output = self.encoder(src)  # BUG: no causal mask", "check": "causal_dependency"}]),
    dict(name="wlm_no_optimizer", repo=EXAMPLES[0], commit=EXAMPLES[1], files=WLM, script="word_language_model/main.py",
         args=WLM_ARGS, data=datamakers.wikitext2_folder, user_files=["model.pt"],
         exit="its default updates p.data by hand (no optimizer): nothing to capture; it runs to its end and saves "
              "model.pt, which must stay the user's"),
    dict(name="time_sequence", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["time_sequence_prediction/train.py"],
         script="time_sequence_prediction/train.py", args=["--steps", "1"], data=datamakers.sine_traindata,
         user_files=["predict0.pdf"],
         env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"},  # torch >= 2.6 refuses its numpy traindata.pt by default
         twins=[{"file": "time_sequence_prediction/train.py", "find": "self.lstm1(input_t, (h_t, c_t))",
                 "replace": "self.lstm1(input_t * 0, (h_t, c_t))  # BUG: the input is zeroed",
                 "check": "input_dependence"}]),
    dict(name="dcgan_fake", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["dcgan/main.py"], script="dcgan/main.py",
         args=["--dataset", "fake", "--batchSize", "8", "--ngf", "8", "--ndf", "8", "--nz", "16", "--niter", "1",
               "--workers", "0", "--outf", "out", "--manualSeed", "1"],
         data=datamakers.nothing, user_files=["out/netG_epoch_0.pth", "out/netD_epoch_0.pth"], packages=TORCHVISION,
         # No lr twin here: the doctor judges D's first micro-batch (real images, every label "real"), which any lr
         # fits (lr 1.0 for Adam took its loss 0.72 -> 0 in 10 steps), so one batch cannot show that lr's harm and
         # update_ratio's WARN (a threshold, no harm shown) is its right verdict; imagenet_dummy carries the lr twin.
         twins=[{"file": "dcgan/main.py", "find": "netD.zero_grad()",
                 "replace": "pass  # BUG: netD.zero_grad() removed: D's gradients pile up, G's backward adds to them",
                 "check": "training_loop"}]),
    dict(name="imagenet_dummy", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["imagenet/main.py"],
         script="imagenet/main.py",  # lr 0.1 per 256 images scaled linearly to the batch of 4 (Goyal et al.'s rule): at
         # the recipe's 0.1 on 4 images, update_ratio's overshoot is real for that batch (7 -> 19 in 10 steps, 0.1x falls)
         args=["--dummy", "-a", "resnet18", "-b", "4", "--lr", "0.0016", "-j", "0", "--epochs", "1", "--no-accel"],
         data=datamakers.nothing, user_files=["checkpoint.pth.tar", "model_best.pth.tar"], packages=TORCHVISION,
         twins=[{"file": "imagenet/main.py", "find": "torch.optim.SGD(model.parameters(), args.lr,",
                 "replace": "torch.optim.SGD(model.parameters(), args.lr * 1000,  # BUG: lr 1.6 with momentum 0.9",
                 "check": "update_ratio"}]),
    dict(name="mnist", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["mnist/main.py"], script="mnist/main.py",
         args=MNIST_ARGS + ["--no-accel"], data=datamakers.mnist_up_one, user_files=["mnist_cnn.pt"],
         packages=TORCHVISION,
         twins=[{"file": "mnist/main.py", "find": "output = F.log_softmax(x, dim=1)",
                 "replace": "output = F.softmax(x, dim=1)  # BUG: probabilities fed to nll_loss", "check": "init_loss"}]),
    dict(name="vae", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["vae/main.py"], script="vae/main.py",
         args=["--batch-size", "16", "--epochs", "1", "--no-accel"], data=datamakers.mnist_up_one, packages=TORCHVISION,
         twins=[{"file": "vae/main.py", "find": "h1 = F.relu(self.fc1(x))",
                 "replace": "h1 = F.relu(self.fc1(x * 0))  # BUG: the encoder never sees the image",
                 "check": "input_dependence"}]),
    dict(name="mnist_rnn", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["mnist_rnn/main.py"],
         script="mnist_rnn/main.py", args=MNIST_ARGS, data=datamakers.mnist_up_one, user_files=["mnist_rnn.pt"],
         packages=TORCHVISION,
         twins=[{"file": "mnist_rnn/main.py", "find": "input = input.reshape(-1, 28, 28)",
                 "replace": "input = input.reshape(-1, 28, 28).flip(0)  # BUG: rows reversed: row i reads image B-1-i",
                 "check": "batch_independence"}]),
    dict(name="siamese", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["siamese_network/main.py"],
         script="siamese_network/main.py", args=MNIST_ARGS + ["--no-accel"], data=datamakers.mnist_up_one,
         user_files=["siamese_network.pt"], packages=TORCHVISION,
         warn={"data_sanity": "true as stated: it feeds raw 0-255 pixels (no Normalize in its transform); the scale "
                              "trial shows no harm, so a warn, not a fail"},
         twins=[{"file": "siamese_network/main.py", "find": "output = torch.cat((output1, output2), 1)",
                 "replace": "output = torch.cat((output1, output1), 1)  # BUG: the second image is never compared",
                 "check": "input_dependence"}]),
    dict(name="super_resolution", repo=EXAMPLES[0], commit=EXAMPLES[1],
         files=["super_resolution/main.py", "super_resolution/data.py", "super_resolution/dataset.py",
                "super_resolution/model.py"],
         script="super_resolution/main.py",  # its README's command (lr 0.001, not the argparse default 0.01), 1 epoch
         args=["--upscale_factor", "3", "--batchSize", "4", "--testBatchSize", "4", "--nEpochs", "1", "--lr", "0.001",
               "--threads", "0"],
         data=datamakers.bsds300, user_files=["model_epoch_1.pth"], packages=TORCHVISION + ["six"],
         twins=[{"file": "super_resolution/model.py", "find": "x = self.relu(self.conv1(x))",
                 "replace": "x = self.relu(self.conv1(x * 0))  # BUG: the low-resolution image is zeroed",
                 "check": "input_dependence"}]),
    dict(name="gat", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["gat/main.py"], script="gat/main.py",
         args=["--epochs", "1", "--hidden-dim", "8", "--num-heads", "2", "--no-accel"], data=datamakers.cora),
    dict(name="reinforce", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["reinforcement_learning/reinforce.py"],
         script="reinforcement_learning/reinforce.py", args=["--seed", "1"], data=datamakers.nothing, packages=GYM),
    dict(name="actor_critic", repo=EXAMPLES[0], commit=EXAMPLES[1], files=["reinforcement_learning/actor_critic.py"],
         script="reinforcement_learning/actor_critic.py", args=["--seed", "1"], data=datamakers.nothing, packages=GYM),
    dict(name="cleanrl_ppo", repo="vwxyzjn/cleanrl", commit="fe8d8a03c41a7ef5b523e2e354bd01c363e786bb",
         files=["cleanrl/ppo.py"], script="cleanrl/ppo.py",
         args=["--no-cuda", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2",
               "--update-epochs", "1"],
         data=datamakers.nothing, packages=GYM + ["tyro==1.0.17", "typeguard==4.6.1", "docstring-parser"]),
    dict(name="lightning_transformer", repo=LIGHTNING[0], commit=LIGHTNING[1],
         files=["examples/pytorch/basics/transformer.py"], script="examples/pytorch/basics/transformer.py", args=[],
         data=datamakers.lightning_wikitext2, warn=LAZY_TENSORS, bug=DEMO_TRANSFORMER_BUG),
    dict(name="fabric_language_model", repo=LIGHTNING[0], commit=LIGHTNING[1],
         files=["examples/fabric/language_model/train.py"], script="examples/fabric/language_model/train.py", args=[],
         data=datamakers.lightning_wikitext2, warn=LAZY_TENSORS, bug=DEMO_TRANSFORMER_BUG),
    dict(name="fabric_image_classifier", repo=LIGHTNING[0], commit=LIGHTNING[1],
         files=["examples/fabric/image_classifier/train_fabric.py"],
         script="examples/fabric/image_classifier/train_fabric.py", args=FABRIC_ARGS, data=datamakers.mnist_fabric,
         user_files=["mnist_cnn.pt"], packages=TORCHVISION,
         twins=[{"file": "examples/fabric/image_classifier/train_fabric.py", "find": "return F.log_softmax(x, dim=1)",
                 "replace": "return F.softmax(x, dim=1)  # BUG: probabilities fed to nll_loss", "check": "init_loss"}]),
    dict(name="torch_image_classifier", repo=LIGHTNING[0], commit=LIGHTNING[1],
         files=["examples/fabric/image_classifier/train_torch.py"],
         script="examples/fabric/image_classifier/train_torch.py", args=FABRIC_ARGS, data=datamakers.mnist_fabric,
         user_files=["mnist_cnn.pt"], packages=TORCHVISION,
         twins=[{"file": "examples/fabric/image_classifier/train_torch.py", "find": "x = torch.flatten(x, 1)",
                 "replace": "x = torch.flatten(x, 1).roll(1, 0)  # BUG: each row gets its neighbour's features",
                 "check": "batch_independence"}]),
    dict(name="lightning_autoencoder", repo=LIGHTNING[0], commit=LIGHTNING[1],
         files=["examples/pytorch/basics/autoencoder.py"], script="examples/pytorch/basics/autoencoder.py",
         args=LIGHTNING_CLI_ARGS, data=datamakers.mnist_lightning_basics, packages=TORCHVISION + JSONARGPARSE,
         twins=[{"file": "examples/pytorch/basics/autoencoder.py", "find": "z = self.encoder(x)",
                 "replace": "z = self.encoder(x * 0)  # BUG: the encoder never sees the image",
                 "check": "input_dependence"}]),
    dict(name="lightning_backbone_classifier", repo=LIGHTNING[0], commit=LIGHTNING[1],
         files=["examples/pytorch/basics/backbone_image_classifier.py"],
         script="examples/pytorch/basics/backbone_image_classifier.py", args=LIGHTNING_CLI_ARGS,
         data=datamakers.mnist_lightning_basics, packages=TORCHVISION + JSONARGPARSE,
         bug={"why": "a ReLU on the logits (return torch.relu(self.l2(x))): a class whose logit goes negative gets no "
                     "gradient and can never be predicted again", "checks": ["gradient_flow", "overfit_one_batch"]},
         twins=[{"file": "examples/pytorch/basics/backbone_image_classifier.py", "find": "x = x.view(x.size(0), -1)",
                 "replace": "x = x.view(x.size(0), -1).roll(1, 0)  # BUG: each row gets its neighbour's image",
                 "check": "batch_independence"}]),
    dict(name="tiny_diffusion", repo="tanelp/tiny-diffusion", commit="726b6bbbf2c9e3d23dff9eaea2fda10d0af6a78c",
         files=["ddpm.py", "datasets.py", "positional_embeddings.py"], script="ddpm.py",
         args=["--dataset", "line", "--train_batch_size", "32", "--num_epochs", "1", "--hidden_size", "32",
               "--embedding_size", "16"],
         data=datamakers.nothing, user_files=["exps/base/model.pth"], packages=["scikit-learn==1.6.1"],
         twins=[{"file": "ddpm.py", "find": "lr=config.learning_rate,",
                 "replace": "lr=config.learning_rate * 1000,  # BUG: lr 1.0 for AdamW", "check": "update_ratio"}]),
]

FIELDS = {"name", "repo", "commit", "files", "script", "cwd", "args", "data", "user_files", "env", "packages", "warn",
          "bug", "exit", "twins"}
REQUIRED = {"name", "repo", "commit", "files", "script", "args", "data"}


def validate(entries):
    """Raise ValueError naming the first entry and field that is not of the documented shape."""
    names = set()
    for entry in entries:
        name = entry.get("name", "?")
        unknown, missing = set(entry) - FIELDS, REQUIRED - set(entry)
        if unknown or missing:
            raise ValueError(f"{name}: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
        if name in names:
            raise ValueError(f"{name}: named twice")
        names.add(name)
        if len(entry["commit"]) != 40 or entry["repo"].count("/") != 1:
            raise ValueError(f"{name}: repo must be owner/name and commit 40 hex digits")
        if entry["script"] not in entry["files"]:
            raise ValueError(f"{name}: script {entry['script']} is not among its files")
        if "bug" in entry and (set(entry["bug"]) != {"why", "checks"} or not isinstance(entry["bug"]["checks"], list)):
            raise ValueError(f"{name}: bug is {{'why': str, 'checks': [check ids whose FAIL shows it]}}")
        if not callable(entry["data"]):
            raise ValueError(f"{name}: data must be a data maker (datamakers.py)")
        for twin in entry.get("twins", []):
            if set(twin) != {"file", "find", "replace", "check"}:
                raise ValueError(f"{name}: a twin needs exactly file, find, replace, check")
            if twin["file"] not in entry["files"] or "# BUG:" not in twin["replace"]:
                raise ValueError(f"{name}: a twin patches one of its files and its replace says '# BUG:'")
