"""init_scale: is each layer's initial weight std what its fan-in calls for?

Symptom
    The loss at init is far above chance, the loss spikes or diverges in the first few thousand
    steps, activations or gradients grow layer by layer. Seed 000's story: the BLOOM team
    "couldn't break past the first few thousands iterations until we figured out that the 0.02
    default `--init-method-std` in Megatron-LM was a way too big for our model"
    (evidence/bekman-instabilities.md#init-std-too-big); for their hidden size of 14336 they used sqrt(1/(14336*3)) = 0.00482.
    The right std "depends on the hidden dimension size" (evidence/bekman-instabilities.md#init-std): a std copied from another model,
    or nn.init.normal_ with its default std of 1.0, is off by a large factor.

What it checks
    No data and no forward pass: for every weight with two or more dimensions it compares the
    std with 1/sqrt(fan_in), the scale that keeps a layer's output at the scale of its input
    (LeCun; fan_in = in_features, or in_channels/groups x kernel size for a convolution, as
    torch.nn.init computes it). Common schemes sit between 0.5x and 1.5x of it: PyTorch's
    default 1/sqrt(3 fan_in) is 0.58x, Kaiming-normal for ReLU sqrt(2/fan_in) is 1.41x, and
    seed 000's sqrt(1/(3 NHIDDEN)) is 0.58x. RNN weights are judged against
    1/sqrt(hidden_size), which is what PyTorch uses for them. Parameters of other module types
    (a raw nn.Parameter matrix) are judged against the fan-in of whichever orientation fits
    better, since their layout is unknown. Embeddings, and raw tables whose first dim is 1
    (a (1, T, D) position table, a (1, 1, D) cls token), are listed but not judged: an embedding
    row is looked up, not summed over a fan-in (init_loss catches a tied output head whose
    embedding is too wide).

      fail   std above 2x 1/sqrt(fan_in): beyond Kaiming's 1.41x, the largest standard scheme,
             with margin; seed 000's 0.02 at fan-in 14336 is 2.4x. Also a weight whose entries
             are all the same non-zero value (its units stay identical: symmetry never breaks).
      warn   std below 0.1x 1/sqrt(fan_in): each such layer in a plain stack shrinks the
             signal 10x. GPT-2-style residual projections (nanoGPT's 0.02/sqrt(2 n_layers))
             sit at 0.08x-0.23x on purpose, which is why this is a warn and not a fail; when
             the small weights are exactly that pattern (a group of k weights sharing one std,
             the others' median std / sqrt(k) within 1.5x: k = 2 n_layers) they are listed in
             details["residual_scaled"] and pass.
      note   all-zero weights (zero-initialised output or residual-branch layers are a
             deliberate choice; details["zero_init"] lists them).
      skip   task["pretrained"] true: trained weights are not at their init scale.

Command
    python diagnostics/init_scale.py                      # embedded demo (planted bug)
    python diagnostics/init_scale.py --healthy            # its healthy twin
    python diagnostics/init_scale.py --case my_case.py --json

Output
    $ python diagnostics/init_scale.py
    [FAIL] init_scale: 0.weight std 0.02 is 2.56x 1/sqrt(fan_in=16384) = 0.00781: above 2x, wider than any standard init
    (exit code 1)
    $ python diagnostics/init_scale.py --healthy
    [PASS] init_scale: 2 weights at 0.58x-0.6x 1/sqrt(fan_in)
    (exit code 0)

How to read it
    details["layers"] has one row per judged weight: name, shape, std, the reference
    1/sqrt(fan_in) and the ratio std/reference. A ratio near 0.58 is PyTorch's default, near
    1.41 Kaiming's; the summary names the worst layer on each side.

Next step
    PLAYBOOK.md#init-scale. Re-initialise the flagged layers (drop the custom init and keep
    PyTorch's default, or use a std that scales with 1/sqrt(fan_in), e.g. sqrt(1/(3*hidden))
    as in seed 000), then rerun init_loss.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, validate_case, preserved, cli_main

TOO_BIG = 2.0  # evidence/bekman-instabilities.md#init-std-too-big: 0.02 at fan-in 14336 (2.4x, derived) blocked training; Kaiming-ReLU is 1.41x
TOO_SMALL = 0.1  # our assumption (10x signal loss per layer); nanoGPT's GPT-2 0.02/sqrt(2*n_layers) projections sit at 0.08x-0.23x (derived), so only a warn
KNOWN_LAYOUT = (torch.nn.Linear, torch.nn.Bilinear, torch.nn.modules.conv._ConvNd, torch.nn.MultiheadAttention)

RESIDUAL_TOLERANCE = 0.405  # ln 1.5: within 1.5x of std / sqrt(k) — our assumption
SAME_STD = 0.182  # ln 1.2: weights drawn at one std measure within 20% of it (tiny 32x32 matrices: ~3%) — our assumption


def fan_in(shape):
    """torch.nn.init's fan-in: dim 1 times the receptive field (the dims after it)."""
    receptive = 1
    for n in shape[2:]:
        receptive *= n
    return shape[1] * receptive


def reference(module, weight, std):
    """(reference std 1/sqrt(fan_in), the rule used) for one weight of non-zero std."""
    if isinstance(module, torch.nn.RNNBase):
        return module.hidden_size ** -0.5, f"1/sqrt(hidden_size={module.hidden_size})"
    n = fan_in(weight.shape)
    if isinstance(module, KNOWN_LAYOUT):
        return n ** -0.5, f"1/sqrt(fan_in={n})"
    n = min(n, n // weight.shape[1] * weight.shape[0], key=lambda c: abs(float(torch.tensor(std * c ** 0.5).log())))
    return n ** -0.5, f"1/sqrt(fan_in={n}) (layout unknown: dim 0 or 1, whichever fits better)"


def check_init_scale(case):
    """Compare each weight's std with 1/sqrt(fan_in) and flag large factors."""
    case = validate_case(case)
    model = case["model"]
    if case["task"].get("pretrained"):
        return CheckResult("init_scale", "skip", "task says the weights are pretrained: they are not at their init scale")
    layers, embeddings, zero_init, constant, seen = [], [], [], [], set()
    with preserved(model):
        for module_name, module in model.named_modules():
            for param_name, weight in module.named_parameters(recurse=False):
                if id(weight) in seen or isinstance(weight, torch.nn.parameter.UninitializedParameter) or weight.ndim < 2 or weight.numel() < 2:
                    continue
                seen.add(id(weight))
                name = f"{module_name}.{param_name}" if module_name else param_name
                values = weight.detach().float()
                std = float(values.std())
                table = weight.shape[0] == 1 and not isinstance(module, KNOWN_LAYOUT)  # (1, T, D) positions, (1, 1, D) cls token
                if table or isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
                    embeddings.append({"name": name, "shape": list(weight.shape), "std": std})
                elif bool((values == values.flatten()[0]).all()):  # (std is ~1e-8, not 0, for most values in float32)
                    (zero_init if float(values.abs().max()) == 0.0 else constant).append(name)
                else:
                    ref, rule = reference(module, weight, std)
                    layers.append({"name": name, "shape": list(weight.shape), "std": std, "reference": ref,
                                   "rule": rule, "ratio": std / ref})
    details = {"layers": layers, "embeddings": embeddings, "zero_init": zero_init, "constant": constant}
    if not layers and not constant:
        return CheckResult("init_scale", "skip", "no weight matrices to judge (embeddings and all-zero weights are not judged)", details)
    big = sorted((row for row in layers if row["ratio"] > TOO_BIG), key=lambda row: -row["ratio"])
    small = sorted((row for row in layers if row["ratio"] < TOO_SMALL), key=lambda row: row["ratio"])
    if small:  # GPT-2's scaled init: the 2 x n_layers residual projections share std (the others' std) / sqrt(2 n_layers)

        def log_ratio(a, b):
            return abs(float(torch.tensor(a / b).log()))

        level = min(row["std"] for row in small)
        group = [row for row in layers if log_ratio(row["std"], level) < SAME_STD]  # small or not: fan-ins differ
        rest = sorted(row["std"] for row in layers if row not in group)
        if rest and all(row in group for row in small) \
                and log_ratio(level * len(group) ** 0.5, rest[len(rest) // 2]) < RESIDUAL_TOLERANCE:
            details["residual_scaled"] = [row["name"] for row in group]
            small = []

    def describe(row):
        return f"{row['name']} std {row['std']:.3g} is {row['ratio']:.3g}x {row['rule']} = {row['reference']:.3g}"

    if constant:
        details["next"] = "re-initialise these weights randomly: identical entries make every unit compute the same thing"
        return CheckResult("init_scale", "fail", f"{', '.join(constant)}: every entry has the same non-zero value, "
                           "so its units never become different", details)
    if big:
        details["next"] = "re-initialise with a std that scales as 1/sqrt(fan_in) (PyTorch's default does)"
        others = f" (+{len(big) - 1} more layers above {TOO_BIG:g}x)" if len(big) > 1 else ""
        return CheckResult("init_scale", "fail", f"{describe(big[0])}: above {TOO_BIG:g}x, wider than any standard init{others}",
                           details)
    if small:
        details["next"] = "unless these are deliberately down-scaled residual projections, use a std of about 1/sqrt(fan_in)"
        others = f" (+{len(small) - 1} more below {TOO_SMALL:g}x)" if len(small) > 1 else ""
        return CheckResult("init_scale", "warn", f"{describe(small[0])}: below {TOO_SMALL:g}x, the signal shrinks through it{others}",
                           details)
    low, high = min(r["ratio"] for r in layers), max(r["ratio"] for r in layers)
    return CheckResult("init_scale", "pass", f"{len(layers)} weights at {low:.2g}x-{high:.2g}x 1/sqrt(fan_in)"
                       + (f"; {len(details['residual_scaled'])} residual projections scaled by 1/sqrt(2 n_layers)"
                          if details.get("residual_scaled") else "")
                       + (f"; zero-initialised: {', '.join(zero_init)}" if zero_init else ""), details)


def make_demo_case(broken=True):
    """An MLP on 16384 input features; the broken twin copies GPT-2's 0.02 init std, fine at width 768 but not for a fan-in of 16384."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(8, 16384)
        y = torch.randint(0, 10, (8,))
        model = torch.nn.Sequential(torch.nn.Linear(16384, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        if broken:
            torch.nn.init.normal_(model[0].weight, std=0.02)  # BUG: 0.02 is 2.6x 1/sqrt(16384) = 0.0078; the std must shrink with fan-in
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 10}}


if __name__ == "__main__":
    sys.exit(cli_main(check_init_scale, make_demo_case, __doc__))
