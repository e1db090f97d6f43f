"""batchnorm: does each BatchNorm layer train on a real batch?

Symptom
    A conv net that trains (the training loss falls) but is poor or erratic in eval mode, or
    whose eval accuracy is far below its training accuracy from the first epoch; or training
    stops with `Expected more than 1 value per channel when training`. The cause: BatchNorm in
    train mode on a batch of one (batch_size=1, a last batch of one without drop_last, or
    gradient accumulation over single samples). Each sample is then normalised by its own
    mean and variance, and the running statistics that eval mode uses are averages of
    per-sample ones, which no sample was ever trained with.

What it checks
    One forward pass (no gradients, the mode as found) with a pre-hook on each BatchNorm
    layer (BatchNorm1d/2d/3d, SyncBatchNorm, lazy ones) that is in train mode, recording the
    shape of its input (N, C, ...):

      fail   one value per channel (N x the spatial size = 1, e.g. BatchNorm1d on (1, C)):
             torch refuses it; the check names the layer.
      fail   one sample (N = 1) with more values per channel (a feature map): the layer
             normalises each sample by its own statistics.
      pass   every train-mode BatchNorm layer sees 2 samples or more, or there is no
             BatchNorm layer at all.
      skip   every BatchNorm layer is in eval mode (frozen BatchNorm, or a model
             put in eval mode: train it in train mode to check).

Command
    python diagnostics/batchnorm.py                      # embedded demo (planted bug)
    python diagnostics/batchnorm.py --healthy            # its healthy twin
    python diagnostics/batchnorm.py --case my_case.py --json

Output
    $ python diagnostics/batchnorm.py
    [FAIL] batchnorm: 1 of 1 BatchNorm layers train on a batch of one (first: layer 1, input (1, 8, 8, 8)): each normalises the sample by its own statistics, and the running statistics used in eval mode never match what it trained with
    (exit code 1)
    $ python diagnostics/batchnorm.py --healthy
    [PASS] batchnorm: 1 train-mode BatchNorm layers, each over 16 samples or more (1024+ values per channel)
    (exit code 0)

How to read it
    details["calls"] lists every call of a train-mode BatchNorm layer in call order, with its
    input shape, samples (N) and values per channel (N times the spatial size). The summary
    names the first layer that trains on one sample, or the one that gets one value per
    channel.

Next step
    PLAYBOOK.md#batchnorm. Batch more than one sample (drop_last=True on the DataLoader stops
    a last batch of one); when memory allows only tiny batches, freeze BatchNorm (eval mode on
    the BatchNorm layers, as detection fine-tunes do) or replace it by GroupNorm or LayerNorm,
    which do not depend on the batch. Then run batch_independence: train-mode BatchNorm mixes
    the rows of a batch by design.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, validate_case, forward, preserved, cli_main


def check_batchnorm(case):
    """The number of samples and values each train-mode BatchNorm layer computes its statistics over."""
    case = validate_case(case)
    model = case["model"]
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not layers:
        return CheckResult("batchnorm", "pass", "no BatchNorm layer in the model: no batch statistics to go wrong")
    training = [(name, m) for name, m in layers if m.training]
    if not training:
        return CheckResult("batchnorm", "skip", f"all {len(layers)} BatchNorm layers are in eval mode: they normalise with "
                           "their running statistics (put the model in train mode, as the training loop does, to check)")
    calls = []  # (layer name, input shape) per call, in call order

    def recorder(name):
        def record(module, args, kwargs):  # the input by position, or by its keyword (bn(input=x))
            x = args[0] if args else kwargs.get("input")
            if isinstance(x, torch.Tensor):
                calls.append((name, tuple(x.shape)))
        return record

    raised = None
    with preserved(model):
        for name, m in training:
            m.register_forward_pre_hook(recorder(name), with_kwargs=True)
        try:
            with torch.no_grad():
                forward(model, case["batch"][0])
        except ValueError as exc:  # F.batch_norm refuses one value per channel in train mode; the hook has the shape
            raised = exc
    per_call = [{"layer": name, "input": list(shape), "samples": shape[0],  # a channel's values: N, or N x L, N x H x W
                 "values_per_channel": shape[0] * torch.Size(shape[2:]).numel()} for name, shape in calls]
    if raised is not None and not (per_call and len(per_call[-1]["input"]) > 1 and per_call[-1]["values_per_channel"] == 1):
        raise raised  # not the one-value refusal: a 1-D input of one value is refused for its shape (2-D or 3-D)
    details = {"layers": len(training), "calls": per_call}
    one_value = [c for c in per_call if c["values_per_channel"] == 1]
    one_sample = [c for c in per_call if c["samples"] == 1 and c["values_per_channel"] > 1]
    if one_value:
        c = one_value[0]
        details["next"] = ("train with more than one sample per batch (drop_last=True avoids a last batch of one), "
                           "or use GroupNorm / LayerNorm")
        return CheckResult("batchnorm", "fail", f"{c['layer']} gets input {tuple(c['input'])} in train mode: its per-channel "
                           "statistics are over one value (torch raises: Expected more than 1 value per channel when training)",
                           details)
    if one_sample:
        names = list(dict.fromkeys(c["layer"] for c in one_sample))  # in call order
        details["next"] = ("batch more than one sample (BatchNorm needs a real batch: 16+ is comfortable), freeze BatchNorm "
                           "(eval mode) when fine-tuning with tiny batches, or use GroupNorm / LayerNorm")
        return CheckResult("batchnorm", "fail", f"{len(names)} of {len(training)} BatchNorm layers train on a batch of one "
                           f"(first: layer {names[0]}, input {tuple(one_sample[0]['input'])}): each normalises the sample by its own "
                           "statistics, and the running statistics used in eval mode never match what it trained with", details)
    smallest = min(per_call, key=lambda c: c["samples"], default=None)
    if smallest is None:
        return CheckResult("batchnorm", "skip", f"none of the {len(training)} train-mode BatchNorm layers ran in the forward pass")
    return CheckResult("batchnorm", "pass", f"{len(training)} train-mode BatchNorm layers, each over {smallest['samples']} samples "
                       f"or more ({min(c['values_per_channel'] for c in per_call)}+ values per channel)", details)


def make_demo_case(broken=True):
    """A small conv net with BatchNorm on 4-class images; the broken twin's loader yields one image per batch."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        batch_size = 16
        if broken:
            batch_size = 1  # BUG: a batch of one: BatchNorm's statistics come from a single image
        x = torch.randn(batch_size, 3, 8, 8)
        y = torch.randint(0, 4, (batch_size,))
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_batchnorm, make_demo_case, __doc__))
