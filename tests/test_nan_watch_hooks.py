"""NanWatch (diagnostics/nan_watch.py): a sentinel on the loss and the gradients at every step, silent on
healthy steps (the -inf causal mask, boolean masks and -inf masked logits included), and on the first step
that makes NaN/inf a replay of it with per-module hooks naming module and phase; no host sync between reads,
and the model left as it was."""
import math

import pytest
import torch

from nan_watch import NanWatch
from state_snapshot import differences, snapshot

T, D, VOCAB = 8, 16, 32


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.out = torch.nn.Linear(D, D)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D) + mask  # the additive mask: -inf above the diagonal
        return self.out(scores.softmax(-1) @ v)


class ScaleNorm(torch.nn.Module):
    """x / |x|, as some hand-written norms do."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x / (x.norm(dim=-1, keepdim=True) + self.eps)


class SafeSqrt(torch.nn.Module):
    """sqrt of the positive part, 0 elsewhere."""

    def forward(self, x):
        return torch.where(x > 0, x.sqrt(), torch.zeros_like(x))  # BUG: sqrt is NaN where x < 0: where() hides it forward, not backward


class Block(torch.nn.Module):
    def __init__(self, eps=1e-6, sqrt=False):
        super().__init__()
        self.norm = ScaleNorm(eps)
        self.attn = Attention()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), SafeSqrt() if sqrt else torch.nn.GELU(), torch.nn.Linear(4 * D, D))

    def forward(self, x, mask):
        x = x + self.attn(self.norm(x), mask)
        return x + self.mlp(x)


class CausalMask(torch.nn.Module):
    def forward(self, x):
        return torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1)  # -inf above the diagonal, a module's output


class TinyGPT(torch.nn.Module):
    def __init__(self, eps=1e-6, sqrt=False):
        super().__init__()
        self.embed = torch.nn.Linear(D, D, bias=False)  # takes float features, so a batch can carry NaN (or zeros)
        self.blocks = torch.nn.ModuleList([Block(eps), Block(eps, sqrt)])
        self.head = torch.nn.Linear(D, VOCAB)
        self.causal = CausalMask()

    def forward(self, x):
        h = self.embed(x)
        mask = self.causal(h)
        for block in self.blocks:
            h = block(h, mask)
        return self.head(h)


def batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, T, D, generator=g), torch.randint(0, VOCAB, (4, T), generator=g)) for _ in range(n)]


def train(model, data, watch=None):
    """Plain loop; returns (losses, reports by step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, reports = [], {}
    for step, (x, y) in enumerate(data):
        def compute(x=x, y=y):
            return torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())

        loss = compute()
        loss.backward()
        if watch is not None:
            report = watch.check(step, loss, replay=compute)
            if report is not None:
                reports[step] = report
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, reports


def test_healthy_run_with_the_minus_inf_causal_mask_is_silent_and_unchanged():
    torch.manual_seed(0)
    model, twin = TinyGPT(), TinyGPT()
    twin.load_state_dict(model.state_dict())
    before = snapshot(model)
    watch = NanWatch(model)
    watched_losses, reports = train(model, batches(4), watch)
    assert reports == {}
    watch.remove()
    after = snapshot(model)
    assert after["hooks"] == before["hooks"] and after["global_hooks"] == before["global_hooks"]
    assert train(twin, batches(4))[0] == watched_losses  # the hooks change nothing, bit for bit


def test_forward_origin_is_named_with_frames():
    torch.manual_seed(0)
    model = TinyGPT(eps=0.0)  # BUG: no eps: an all-zero row divides 0 by 0
    data = batches(5)
    data[3][0][1, 2] = 0.0  # one zero row in the batch of step 3: blocks.0.norm sees it first
    watch = NanWatch(model)
    embedded = []  # what embed outputs at each step
    handle = model.embed.register_forward_hook(lambda module, args, out: embedded.append(out.detach()))
    _, reports = train(model, data, watch)
    handle.remove()
    report = reports[3]
    assert (report["step"], report["module"], report["phase"], report["source"]) == (3, "blocks.0.norm", "forward", "module")
    assert report["class"] == "ScaleNorm"
    embed, causal, norm = report["frames"]  # the modules that ran in step 3's forward, up to the origin
    assert [f["module"] for f in report["frames"]] == ["embed", "causal", "blocks.0.norm"]
    x, h = data[3][0], embedded[3]
    assert embed["in"] == [None, round3(x.abs().max())] and embed["out"] == [None, round3(h.abs().max())]
    assert causal["out"] == [0.0, "inf"]  # [abs min, abs max] of the -inf causal mask: signed, it is [-inf, 0]
    assert norm["in"] == embed["out"] and norm["out"] == ["nan", "nan"]


def round3(t):
    return float(f"{float(t.detach()):.3g}")


class Reciprocal(torch.nn.Module):
    def forward(self, x):
        return 1 / x  # BUG: no guard against 0


def test_frames_are_abs_min_and_abs_max():
    """Signed [min, max] becomes [abs min, abs max]; the abs min of a tensor holding both signs is None."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LogSigmoid(), torch.nn.ReLU(), Reciprocal())
    x = torch.randn(3, 4)
    watch = NanWatch(model)
    loss = model(x).sum()
    loss.backward()
    report = watch.check(0, loss, replay=lambda: model(x).sum())
    assert (report["step"], report["module"], report["phase"], report["source"]) == (0, "3", "forward", "module")
    linear, logsigmoid, relu, reciprocal = report["frames"]
    with torch.no_grad():
        h = model[0](x)
        negative = model[1](h)  # all below 0
    assert float(negative.max()) < 0
    assert linear["in"] == [None, round3(x.abs().max())] and linear["out"] == [None, round3(h.abs().max())]
    assert logsigmoid["out"] == [round3(-negative.max()), round3(-negative.min())]
    assert relu["out"] == [0.0, 0.0] and reciprocal["in"] == [0.0, 0.0] and reciprocal["out"] == ["inf", "inf"]
    watch.remove()


def test_backward_origin_is_named():
    torch.manual_seed(0)
    watch = NanWatch(model := TinyGPT(sqrt=True))
    _, reports = train(model, batches(2), watch)
    report = reports[0]
    assert (report["module"], report["phase"], report["source"]) == ("blocks.1.mlp.1", "backward", "module")
    assert report["class"] == "SafeSqrt" and report["frames"][-1]["module"] == "blocks.1.mlp.1"
    assert report["frames"][-1]["out"] == ["nan", "nan"]  # the gradient SafeSqrt sends back to its input
    for frame in report["frames"][:-1]:  # the finite gradients before it: abs values, abs min unknown or >= 0
        span = frame["in"] or frame["out"]
        assert span[0] is None or 0 <= span[0] <= span[1], frame


def test_a_nan_batch_is_named_as_the_inputs():
    torch.manual_seed(0)
    data = batches(3)
    data[1][0][0, 0, 0] = float("nan")  # BUG: a corrupt sample in the batch of step 1
    watch = NanWatch(model := TinyGPT())
    _, reports = train(model, data, watch)
    assert (reports[1]["module"], reports[1]["phase"], reports[1]["source"]) == ("TinyGPT", "forward", "inputs")
    # unguarded, the step went through and the NaN reached every weight: the next step names the first layer
    assert (reports[2]["module"], reports[2]["phase"], reports[2]["source"]) == ("embed", "forward", "module")


def test_reads_the_verdict_once_every_n_checks_and_reports_the_first_bad_step(monkeypatch):
    torch.manual_seed(0)
    model = TinyGPT(eps=0.0)
    data = batches(8)
    data[5][0][0, 0] = 0.0  # a zero row at step 5, read at the 8th check (every=4)
    watch = NanWatch(model, every=4)
    syncs = []
    for name in ("tolist", "item", "__bool__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _real=real, _name=name: syncs.append(_name) or _real(self, *a))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    results = []
    for step, (x, y) in enumerate(data):
        def compute(x=x, y=y):
            return torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())

        loss = compute()
        loss.backward()
        before = len(syncs)
        results.append(watch.check(step, loss, replay=compute))
        results[-1] = (results[-1], len(syncs) - before)
        opt.zero_grad(set_to_none=True)
    assert [n for _, n in results[:3]] == [0, 0, 0] and results[3] == (None, 1)  # reads at the 4th check only
    assert [r for r, _ in results[4:7]] == [None] * 3 and results[7][0]["step"] == 5
    # read at step 7, when the weights are no longer those step 5 started from: the step is named, not its module
    assert (results[7][0]["module"], results[7][0]["source"]) == (None, "sentinel")


def test_with_every_n_the_last_step_of_a_read_is_replayed_and_named():
    torch.manual_seed(0)
    model = TinyGPT(eps=0.0)
    data = batches(8)
    data[7][0][0, 0] = 0.0  # a zero row at step 7: the 8th check reads it while its weights are still there
    watch = NanWatch(model, every=4)
    _, reports = train(model, data, watch)
    assert {step: (r["module"], r["phase"], r["source"]) for step, r in reports.items()} == \
        {7: ("blocks.0.norm", "forward", "module")}


def test_hf_llama_with_boolean_and_additive_masks_is_silent():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    for attention in ("eager", "sdpa"):
        config._attn_implementation = attention
        model = transformers.LlamaForCausalLM(config)
        watch = NanWatch(model)
        ids = torch.randint(0, 64, (2, 12))
        attention_mask = torch.ones(2, 12, dtype=torch.long)
        attention_mask[1, :4] = 0  # left padding: a masked row block
        for step in range(2):
            loss = model(input_ids=ids, attention_mask=attention_mask, labels=ids).loss
            loss.backward()
            assert watch.check(step, loss) is None, attention
        watch.remove()


def test_keeps_no_activation_alive_and_remove_is_final():
    import gc
    import weakref

    torch.manual_seed(0)
    model = TinyGPT()
    watch = NanWatch(model)
    seen = []
    handle = model.blocks[0].mlp.register_forward_hook(lambda m, a, out: seen.append(weakref.ref(out)))
    (x, y), = batches(1)
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    assert watch.check(0, loss, replay=lambda: torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())) is None
    handle.remove()
    gc.collect()
    assert seen and seen[0]() is None  # the stats are numbers on the device, not references to activations
    watch.remove()
    model(x).sum().backward()
    assert watch.check(1) is None and watch._pending == []


def test_a_replay_with_many_tensors_and_two_dtypes_names_the_bad_step_only(monkeypatch):
    """Values of each dtype go to their own blocks, a replay that outgrows a block takes more, and only
    the bad step is replayed."""
    import nan_watch
    monkeypatch.setattr(nan_watch._Values, "SIZE", 4)  # a few tensors per block: every replay takes several
    read = []  # (step, the dtypes measured) of each replay: the bad step only
    real_report = NanWatch._report
    monkeypatch.setattr(NanWatch, "_report", lambda self, step, log, *rest: read.append((step, {d for d, _ in log.values}))
                        or real_report(self, step, log, *rest))

    class Bf16Head(torch.nn.Module):  # the head computes in bfloat16: its values sit in bfloat16 blocks
        def __init__(self):
            super().__init__()
            self.norm = ScaleNorm(0.0)  # BUG: no eps: an all-zero row divides 0 by 0
            self.proj = torch.nn.Linear(D, VOCAB).to(torch.bfloat16)

        def forward(self, x):
            return self.proj(self.norm(x.to(torch.bfloat16))).float()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.GELU(), torch.nn.Linear(D, D), Bf16Head())
    watch = NanWatch(model)
    reports = {}
    for step, (x, y) in enumerate(batches(5)):
        if step == 2:
            torch.nn.init.zeros_(model[2].weight)
            torch.nn.init.zeros_(model[2].bias)  # step 2 only: the head's input is all zeros
        def compute(x=x, y=y, step=step):
            if step == 3:  # another loss, from fewer tensors
                return model[0](x).square().mean()
            return torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())

        loss = compute()
        loss.backward()
        if (report := watch.check(step, loss, replay=compute)) is not None:
            reports[step] = report
        model.zero_grad(set_to_none=True)  # no optimizer step: the weights stay finite after the bad step
        if step == 2:
            torch.nn.init.normal_(model[2].weight)
            torch.nn.init.normal_(model[2].bias)
    assert {step: (r["module"], r["phase"], r["source"]) for step, r in reports.items()} == {2: ("3.norm", "forward", "module")}
    assert reports[2]["frames"][-1]["in"] == [0.0, 0.0] and reports[2]["frames"][-1]["out"] == ["nan", "nan"]
    assert read == [(2, {torch.float32, torch.bfloat16})]  # the healthy steps were not replayed
    watch.remove()


class ExpProbe(torch.nn.Module):
    def forward(self, x):
        return x.exp().sum()  # finite for an input of -inf


class LogThenProbe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.probe = ExpProbe()

    def forward(self, x):
        h = x.log()  # BUG: log of 0 is -inf
        return h, self.probe(h)  # h is the probe's input first (no verdict), then this module's own output


def test_a_tensor_met_as_an_input_then_returned_as_an_output_is_judged_as_an_output():
    torch.manual_seed(0)
    model = LogThenProbe()
    watch = NanWatch(model)
    x = torch.rand(3, 4, requires_grad=True)

    def compute():
        h, probed = model(x)
        return h.sum() + probed

    assert watch.check(0, compute(), replay=compute) is None  # every value finite: silent
    with torch.no_grad():
        x[0, 0] = 0.0
    h, probed = model(x)
    assert math.isfinite(probed.item()) and h.min().item() == float("-inf")
    report = watch.check(1, compute(), replay=compute)  # the -inf reaches the loss
    assert (report["step"], report["module"], report["phase"], report["source"]) == (1, "LogThenProbe", "forward", "module")
    assert report["frames"][-1]["out"] == [round3(min(-h.max(), probed)), "inf"]  # h is <= 0, the probe's sum > 0
    watch.remove()


class ToFloat8(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.float8_e4m3fn)


@pytest.mark.hostile
def test_float8_and_empty_tensors_are_not_measured_and_never_raise():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), ToFloat8())
    watch = NanWatch(model)
    x = torch.randn(2, 4)

    def compute():
        out = model(x)  # aminmax has no float8 kernel on CPU: measuring the output would raise here
        assert out.dtype == torch.float8_e4m3fn
        return model[0](torch.randn(0, 4)).sum() + float("nan")  # an empty batch: nothing to measure; a NaN loss

    report = watch.check(0, compute(), replay=compute)
    assert (report["module"], report["phase"], report["source"]) == (None, "forward", "outside")
    watch.remove()


@pytest.mark.hostile
@pytest.mark.parametrize("every", [0, -1, 1.5, "2"])
def test_bad_every_is_a_clear_error(every):
    with pytest.raises(ValueError, match="every must be a positive integer"):
        NanWatch(TinyGPT(), every=every)


# --- the misuse findings of issue 25: a report only when a NaN or an inf reaches the loss or a gradient --------------


class WithEmptyParameter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.prefix = torch.nn.Parameter(torch.zeros(0, D))  # zero prefix tokens: an empty parameter, as prompt tuning has
        self.proj = torch.nn.Linear(D, VOCAB)

    def forward(self, x):
        return self.proj(torch.cat([self.prefix.expand(x.shape[0], 0, D), x], 1))


@pytest.mark.hostile
def test_a_zero_size_parameter_neither_raises_nor_hides_a_bad_step():
    torch.manual_seed(0)
    model = WithEmptyParameter()
    data = batches(3)
    data[2][0][0, 0, 0] = float("nan")  # BUG: a corrupt sample at step 2
    watch = NanWatch(model)
    _, reports = train(model, data, watch)  # backward raised here when an empty gradient was measured
    assert {step: (r["module"], r["source"]) for step, r in reports.items()} == {2: ("WithEmptyParameter", "inputs")}


class SparseEmbedder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D, sparse=True)  # its gradient is a sparse tensor
        self.root = SafeSqrt()
        self.head = torch.nn.Linear(D, VOCAB)

    def forward(self, ids):
        return self.head(self.root(self.embed(ids)))


@pytest.mark.hostile
def test_a_sparse_embedding_neither_raises_nor_hides_a_backward_nan():
    torch.manual_seed(0)
    model = SparseEmbedder()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    watch = NanWatch(model)
    g = torch.Generator().manual_seed(0)
    reports = {}
    for step in range(3):
        ids = torch.randint(0, VOCAB, (4, T), generator=g)

        def compute(ids=ids):
            return torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())

        with torch.no_grad():
            model.embed.weight.abs_()
            if step == 2:
                model.embed.weight[ids[0, 0]] = -1.0  # a negative row at step 2: sqrt's gradient is NaN there
        loss = compute()
        loss.backward()  # backward raised here when the sparse gradient was measured
        if (report := watch.check(step, loss, replay=compute)) is not None:
            reports[step] = report
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert {step: (r["module"], r["phase"], r["source"]) for step, r in reports.items()} == \
        {2: ("root", "backward", "module")}


class MaskedLogits(torch.nn.Module):
    def forward(self, logits):
        return logits.masked_fill(torch.arange(logits.shape[-1]) >= VOCAB // 2, float("-inf"))  # classes not allowed here


class MaskedHead(torch.nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.proj = torch.nn.Linear(D, VOCAB)
        self.mask = MaskedLogits()
        self.side = torch.nn.Linear(D, D)
        self.norm = ScaleNorm(eps)

    def forward(self, x):
        logits = self.mask(self.proj(x))
        return logits + 0 * self.norm(self.side(x)).sum()  # a side branch, after the mask, that adds 0 when finite


def masked_batches(n):
    return [(x, y % (VOCAB // 2)) for x, y in batches(n)]  # the targets are allowed classes


def test_logits_masked_with_minus_inf_give_a_finite_loss_and_no_report():
    torch.manual_seed(0)
    watch = NanWatch(model := MaskedHead())
    losses, reports = train(model, masked_batches(4), watch)
    assert reports == {} and all(math.isfinite(v) for v in losses)


def test_a_nan_after_a_minus_inf_mask_is_blamed_on_the_module_that_made_it_not_on_the_mask():
    torch.manual_seed(0)
    model = MaskedHead(eps=0.0)  # BUG: no eps in the side branch's norm
    data = masked_batches(3)
    watch = NanWatch(model)
    torch.nn.init.zeros_(model.side.weight)
    torch.nn.init.zeros_(model.side.bias)  # the side branch's output is all zero: its norm divides 0 by 0
    _, reports = train(model, data[:1], watch)
    assert (reports[0]["module"], reports[0]["phase"], reports[0]["source"]) == ("norm", "forward", "module")


def test_a_nan_loss_made_outside_any_module_is_reported():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(16, 4)

    def compute():
        return model(x).log().mean()  # BUG: log of a prediction that can be negative, outside any module

    watch = NanWatch(model)
    loss = compute()
    loss.backward()
    report = watch.check(0, loss, replay=compute)
    assert (report["step"], report["module"], report["phase"], report["source"]) == (0, None, "forward", "outside")
    assert [f["module"] for f in report["frames"]] == ["0", "1", "2", "Sequential"]  # every output finite
    assert watch.check(1) is None  # no loss, no gradients: nothing to say


class Dropped(torch.nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(D)
        self.narrow = torch.nn.Linear(D, 4)
        self.drop = torch.nn.Dropout(0.5)
        self.norm = ScaleNorm(eps)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.norm(self.drop(self.narrow(self.bn(x)))))


@pytest.mark.parametrize("raises", [False, True])
def test_the_replay_leaves_weights_gradients_buffers_rng_modes_and_hooks_as_found(raises):
    """The replay runs BatchNorm (which updates its running stats) and Dropout (which draws random numbers)."""
    from state_snapshot import assert_unchanged
    torch.manual_seed(0)
    model = Dropped(eps=0.0)  # BUG: no eps: a row whose 4 features dropout all zeroes divides 0 by 0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, D), torch.randint(0, 2, (4,))
    watch = NanWatch(model)
    for step in range(50):  # until dropout zeroes a whole row (1 in 16 per row and step): a replay with another
        # dropout mask than the step's would most likely not reproduce it
        def compute():
            if raises:
                model(x)
                raise RuntimeError("the replay failed")
            return torch.nn.functional.cross_entropy(model(x), y)

        watch.begin()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if not math.isfinite(loss.item()):
            break
        assert watch.check(step, loss, replay=compute) is None
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert not math.isfinite(loss.item()), "dropout never zeroed a whole row"
    model.head.register_forward_hook(lambda *a: None)  # a user's hook stays
    before = snapshot(model, opt)
    if raises:
        with pytest.raises(RuntimeError, match="the replay failed"):
            watch.check(step, loss, replay=compute)
    else:
        report = watch.check(step, loss, replay=compute)  # the replay draws the same dropout mask: it names the norm
        assert (report["step"], report["module"], report["source"]) == (step, "norm", "module")
    assert_unchanged(before, snapshot(model, opt))
    assert differences(before, snapshot(model, opt)) == []


def test_a_replay_that_returns_no_loss_names_a_forward_nan_and_never_blames_the_loss():
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), SafeSqrt())  # BUG: a NaN gradient where its input is < 0
    watch = NanWatch(model)
    model(x).sum().backward()
    report = watch.check(0, replay=lambda: {"logits": model(x)})  # the loss is computed outside, as HF's compute_loss
    assert (report["module"], report["source"]) == (None, "not reproduced")  # a finite forward, and no loss to go back from
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), Reciprocal())
    torch.nn.init.zeros_(model[0].weight)
    torch.nn.init.zeros_(model[0].bias)  # every output 1/0
    watch = NanWatch(model)
    model(x).sum().backward()
    report = watch.check(1, replay=lambda: {"logits": model(x)})
    assert (report["step"], report["module"], report["phase"], report["source"]) == (1, "1", "forward", "module")


def test_a_model_trained_in_eval_mode_is_replayed_and_named():
    """Some fine-tuning runs train with model.eval() (dropout off): the replay watches that mode too."""
    torch.manual_seed(0)
    model = TinyGPT(eps=0.0).eval()
    data = batches(2)
    data[1][0][0, 0] = 0.0  # a zero row at step 1: blocks.0.norm divides 0 by 0
    watch = NanWatch(model)
    _, reports = train(model, data, watch)
    assert {step: (r["module"], r["phase"], r["source"]) for step, r in reports.items()} == \
        {1: ("blocks.0.norm", "forward", "module")}
    assert not model.training  # and it stays in eval mode


class GainFromStats(torch.nn.Module):
    """A gain computed without gradient (statistics of a detached input), as some adaptive scalings do."""

    def forward(self, x):
        spread = x.detach().std(-1, keepdim=True)
        return spread / spread  # BUG: 0/0 on a constant row: NaN in an output that needs no gradient


class Gained(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(D, D)
        self.gain = GainFromStats()

    def forward(self, x):
        return self.proj(x) * self.gain(x)


def test_a_nan_in_an_output_that_needs_no_gradient_is_named_where_it_was_made():
    torch.manual_seed(0)
    model = Gained()
    x = torch.randn(4, D)
    x[2] = 1.0  # a constant row

    def compute():
        return model(x).square().mean()

    loss = compute()
    loss.backward()
    report = NanWatch(model).check(0, loss, replay=compute)
    assert (report["module"], report["class"], report["phase"], report["source"]) == ("gain", "GainFromStats", "forward", "module")


class RootGain(torch.nn.Module):
    """Multiplies by sqrt of a learned gain where it is positive: finite forward and input gradient, but the
    gain's own gradient is NaN where it is negative. Beside it, a frozen table and a weight tied to another module."""

    def __init__(self, tied):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(D))
        self.frozen = torch.nn.Parameter(torch.ones(D), requires_grad=False)
        self.tied = tied
        self.tied_weight = tied.weight  # the same Parameter, registered here too

    def forward(self, x):
        root = torch.where(self.gain > 0, self.gain.clamp_min(0).sqrt(), self.gain.sqrt())  # BUG: sqrt of a negative
        return self.tied(x * torch.where(self.gain > 0, root, torch.zeros_like(root)) * self.frozen)


def test_a_nan_gradient_made_for_a_parameter_is_named_with_the_parameter():
    torch.manual_seed(0)
    head = torch.nn.Linear(D, D)
    model = torch.nn.Sequential(head, RootGain(head))  # head's weight is also RootGain's own: hooked once
    x = torch.randn(4, D)
    with torch.no_grad():
        model[1].gain[3] = -1.0

    def compute():
        return model(x).square().mean()

    loss = compute()
    loss.backward()
    assert torch.isfinite(loss) and not torch.isfinite(model[1].gain.grad).all()
    report = NanWatch(model).check(0, loss, replay=compute)
    assert (report["module"], report["phase"], report["source"]) == ("1", "backward", "module")
    assert report["frames"][-1]["param"] == "gain" and report["frames"][-1]["out"] == ["nan", "nan"]


def test_no_loss_and_no_gradient_is_nothing_to_say_and_the_reasons_a_module_is_not_named():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 2), Reciprocal())
    assert NanWatch(model).check(0) is None  # no backward yet, no loss given
    torch.nn.init.zeros_(model[0].weight)
    torch.nn.init.zeros_(model[0].bias)
    x = torch.randn(3, 4)
    model(x).sum().backward()
    report = NanWatch(model).check(1)
    assert (report["step"], report["module"], report["source"]) == (1, None, "sentinel") and "replay=" in report["summary"]
    watch = NanWatch(model, every=2)
    watch.check(2, replay=lambda: model(x).sum())
    report = watch.check(3)  # the bad step 2 is read at step 3: its weights are no longer at hand
    assert (report["step"], report["source"]) == (2, "sentinel") and "every=2" in report["summary"]
