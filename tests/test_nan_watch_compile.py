"""NanWatch under torch.compile (backend aot_eager: no C compiler needed): attached, it adds no graph break to a
compiled model, and a planted inf in a named module at a named step is named, compiled as eagerly."""
import pytest
import torch

from nan_watch import NanWatch

D, CLASSES, BAD = 16, 5, 3


class Plant(torch.nn.Module):
    """Multiplies by a buffer: 1 on every step but the planted one, where the test sets it to inf."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(()))

    def forward(self, x):
        return x * self.scale


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.GELU(), Plant(), torch.nn.Linear(2 * D, D))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(D, CLASSES)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def graph_breaks(model, x, y):
    torch._dynamo.reset()
    return torch._dynamo.explain(lambda a, b: loss_of(model, a, b))(x, y).graph_break_count


def test_attached_the_watch_adds_no_graph_break_also_after_a_replay():
    torch.manual_seed(0)
    model = Tiny()
    x, y = torch.randn(8, D), torch.randint(0, CLASSES, (8,))
    without = graph_breaks(model, x, y)
    watch = NanWatch(model)
    attached = graph_breaks(model, x, y)
    model.blocks[1].mlp[2].scale.fill_(float("inf"))
    loss = loss_of(model, x, y)
    assert watch.check(0, loss, replay=lambda: loss_of(model, x, y))["module"] == "blocks.1.mlp.2"
    model.blocks[1].mlp[2].scale.fill_(1.0)
    after = graph_breaks(model, x, y)
    assert attached == without and after == without, (without, attached, after)
    torch._dynamo.reset()


def planted_run_reports(backend=None, device="cpu"):
    """Five AdamW steps of Tiny, compiled with `backend` (None: eager), an inf planted in blocks.1.mlp.2 at step BAD:
    {step: report} of the watch's check() after each backward (a reported step is skipped, as SpikeGuard would)."""
    torch.manual_seed(0)
    model = Tiny().to(device)
    run = torch.compile(model, backend=backend) if backend else model
    watch = NanWatch(run)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    reports = {}
    for step in range(5):
        x, y = torch.randn(8, D, generator=g).to(device), torch.randint(0, CLASSES, (8,), generator=g).to(device)
        model.blocks[1].mlp[2].scale.fill_(float("inf") if step == BAD else 1.0)  # BUG: an overflow at step BAD
        loss = loss_of(run, x, y)
        loss.backward()
        report = watch.check(step, loss, replay=lambda x=x, y=y: loss_of(run, x, y))
        if report is not None:
            reports[step] = report
            opt.zero_grad(set_to_none=True)
            continue
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    return reports


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_a_planted_inf_in_a_named_module_at_a_named_step_is_named(backend):
    reports = planted_run_reports(backend)
    assert {step: (r["module"], r["class"], r["phase"], r["source"]) for step, r in reports.items()} == \
        {BAD: ("blocks.1.mlp.2", "Plant", "forward", "module")}
    assert reports[BAD]["frames"][-1]["out"][1] == "inf"
