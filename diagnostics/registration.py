"""registration: are all the model's submodules and tensors registered?

Symptom
    Part of the model never changes: its layers keep their initial weights, the loss plateaus
    higher than the architecture should allow, `model.to("cuda")` is followed by
    `Expected all tensors to be on the same device`, a reloaded checkpoint misses layers, or
    the parameter count printed at start-up is smaller than the design says. The cause: blocks
    kept in a plain Python list or dict (`self.blocks = [Block() for _ in range(n)]`) or a
    tensor assigned as a plain attribute. nn.Module registers only modules, nn.Parameter and
    buffers assigned directly, and ModuleList / ModuleDict / ParameterList contents.

What it checks
    Walks every module's own attributes (not the ones nn.Module keeps) and the lists, tuples
    and dicts inside them (three levels deep), for modules and tensors that model.modules(),
    model.parameters() and model.buffers() do not reach. Then runs one forward pass (no
    gradients, the mode as found) under a TorchFunctionMode that records every tensor handed
    to a torch function, to see which of them the forward pass uses:

      fail   a tensor that requires grad, not registered and used in forward: the optimizer,
             built from model.parameters(), never updates it.
      warn   a tensor that does not require grad (a mask, a table, a frozen module in a
             list), not registered and used in forward: `.to(device)` leaves it behind and
             the state_dict does not save it.
      pass   nothing unregistered, or unregistered objects the forward pass does not use
             (listed in details: a reference list of registered layers is fine).

    Unregistered modules are not in model.modules(), so the check restores them too.

Command
    python diagnostics/registration.py                      # embedded demo (planted bug)
    python diagnostics/registration.py --healthy            # its healthy twin
    python diagnostics/registration.py --case my_case.py --json

Output
    $ python diagnostics/registration.py
    [FAIL] registration: 6 trainable tensors (816 values) used in forward are not registered, in hidden (a plain list of 3 Linear): model.parameters() and the optimizer never see them, so they are never trained, nor moved by .to(), nor saved in the state_dict
    (exit code 1)
    $ python diagnostics/registration.py --healthy
    [PASS] registration: all 14 modules and tensors reached are registered; none is held in a plain list, dict or attribute
    (exit code 0)

How to read it
    The summary names the attribute (`hidden`) and what it holds. details["unregistered_used"]
    lists each unregistered tensor the forward pass used, by path (`hidden[0].weight`);
    details["unregistered_unused"] the ones it did not use; details["untrained_parameters"]
    the number of values the optimizer never sees.

Next step
    PLAYBOOK.md#registration. Use nn.ModuleList / nn.ModuleDict for submodules, nn.Parameter
    (or nn.ParameterList) for trainable tensors, self.register_buffer(name, tensor) for the
    rest, then compare sum(p.numel() for p in model.parameters()) with the size you expect.
    Run gradient_flow and overfit_one_batch afterwards.
"""
import sys

try:
    import torch
except KeyboardInterrupt:  # Ctrl-C while torch loads (a second or two): as a command, end quietly like main() does
    if __name__ == "__main__":
        sys.exit(130)
    raise

from ml_debug_contract import CheckResult, validate_case, forward, preserved, cli_main

MAX_ITEMS = 10_000  # our assumption: containers are walked up to this many items, so a huge cached list cannot stall the check
MODULE_ATTRIBUTES = set(vars(torch.nn.Module()))  # what nn.Module itself keeps in an instance: not the user's attributes


class TensorsSeen(torch.overrides.TorchFunctionMode):
    """Records the id of every tensor handed to a torch function (or method) during the forward pass."""

    def __init__(self):
        super().__init__()
        self.ids = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for value in (*args, *kwargs.values()):
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, torch.Tensor):
                    self.ids.add(id(item))
        return func(*args, **kwargs)


def held_outside(model):
    """[(where, object, holder)] for the modules and tensors a module attribute holds outside the module tree: a
    plain tensor attribute (holder "tensor attribute"), or modules and tensors inside a list, tuple or dict attribute
    (holder "list", "tuple" or "dict")."""
    found, budget = [], [MAX_ITEMS]

    def walk(where, value, depth, holder):
        budget[0] -= 1
        if budget[0] < 0:
            return
        if isinstance(value, (torch.nn.Module, torch.Tensor)):
            found.append((where, value, holder))
        elif isinstance(value, (list, tuple)) and depth < 3:
            for i, item in enumerate(value):
                walk(f"{where}[{i}]", item, depth + 1, holder)
        elif isinstance(value, dict) and depth < 3:
            for key, item in value.items():
                walk(f"{where}[{key!r}]", item, depth + 1, holder)

    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr not in MODULE_ATTRIBUTES:
                walk(f"{name}.{attr}" if name else attr, value, 0,
                     type(value).__name__ if isinstance(value, (list, tuple, dict)) else "tensor attribute")
    return found


def container_of(where):
    """`blocks[3].mlp` -> `blocks`: the attribute a finding is grouped under."""
    return where.split("[", 1)[0]


def describe(outside, groups):
    """`blocks (a plain list of 4 Block), scale (a plain tensor attribute)`."""
    parts = []
    for group in groups:
        inside = [(obj, holder) for where, obj, holder in outside if container_of(where) == group]
        holder = inside[0][1]
        if holder == "tensor attribute":
            parts.append(f"{group} (a plain tensor attribute)")
        else:
            names = sorted({type(obj).__name__ for obj, _ in inside})
            parts.append(f"{group} (a plain {holder} of {len(inside)} {'/'.join(names)})")
    return ", ".join(parts)


def check_registration(case):
    """Modules and tensors used in forward that model.parameters(), .buffers() and .modules() do not reach."""
    case = validate_case(case)
    model = case["model"]
    registered = {id(t) for t in (*model.parameters(), *model.buffers())} | {id(m) for m in model.modules()}
    outside = [found for found in held_outside(model) if id(found[1]) not in registered]
    tensors = {}  # id -> (where, tensor): every tensor the unregistered objects hold, parameters and buffers included
    for where, obj, _ in outside:
        if isinstance(obj, torch.nn.Module):
            for name, t in (*obj.named_parameters(), *obj.named_buffers()):
                if id(t) not in registered:
                    tensors.setdefault(id(t), (f"{where}.{name}", t))
        else:
            tensors.setdefault(id(obj), (where, obj))
    if not tensors:
        return CheckResult("registration", "pass", f"all {len(registered)} modules and tensors reached are registered; "
                           "none is held in a plain list, dict or attribute")
    loose = torch.nn.ModuleList([obj for _, obj, _ in outside if isinstance(obj, torch.nn.Module)])
    with preserved(model), preserved(loose):  # the loose modules are not in model.modules(): restore them too
        seen = TensorsSeen()
        with torch.no_grad(), seen:
            forward(model, case["batch"][0])
    used = {key: value for key, value in tensors.items() if key in seen.ids}
    trainable = {key: value for key, value in used.items() if value[1].requires_grad}
    groups = sorted({container_of(where) for where, _ in (trainable or used).values()})
    details = {"unregistered_used": sorted(where for where, _ in used.values()),
               "unregistered_unused": sorted(where for key, (where, _) in tensors.items() if key not in used),
               "containers": groups}
    if trainable:
        count = sum(t.numel() for _, t in trainable.values())
        details.update(untrained_parameters=count,
                       next="hold submodules in nn.ModuleList / nn.ModuleDict and trainable tensors in nn.Parameter")
        return CheckResult("registration", "fail", f"{len(trainable)} trainable tensors ({count} values) used in forward are "
                           f"not registered, in {describe(outside, groups)}: "
                           "model.parameters() and the optimizer never see them, so they are never trained, "
                           "nor moved by .to(), nor saved in the state_dict", details)
    if used:
        details["next"] = "register them: self.register_buffer(name, tensor) (persistent=False if not to be saved)"
        return CheckResult("registration", "warn", f"{len(used)} tensors used in forward are not registered, in "
                           f"{describe(outside, groups)}: "
                           ".to(device) leaves them behind and the state_dict does not save them", details)
    holders = sorted({container_of(where) for where, _ in tensors.values()})
    return CheckResult("registration", "pass", f"{len(tensors)} unregistered tensors ({', '.join(holders)}) are not used in "
                       "forward", details)


class DemoMLP(torch.nn.Module):
    def __init__(self, broken):
        super().__init__()
        layers = [torch.nn.Linear(16, 16) for _ in range(3)]
        hidden = torch.nn.ModuleList(layers)
        if broken:
            hidden = layers  # BUG: a plain list: the three layers are not registered
        self.hidden = hidden
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):  # (B, 16) -> (B, 4)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)


def make_demo_case(broken=True):
    """A 4-class MLP whose hidden layers sit in a list; the broken twin's list is a plain Python list."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(32, 16)
        y = (x @ torch.randn(16, 4)).argmax(dim=1)
        model = DemoMLP(broken)
    return {"model": model, "batch": (x, y), "loss_fn": torch.nn.functional.cross_entropy,
            "task": {"kind": "classification", "num_classes": 4}}


if __name__ == "__main__":
    sys.exit(cli_main(check_registration, make_demo_case, __doc__))
