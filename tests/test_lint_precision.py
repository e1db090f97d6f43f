"""lint.py on what real projects taught it (issue 24): the false findings found outside our corpus stay silent
(each as its minimal look-alike), the gradient-accumulation rules decide what they should, and the recall
lost since the precision work is back."""
import textwrap

import pytest

import lint


def findings(code, path="<string>"):
    return [(f.rule, f.line) for f in lint.lint_source(textwrap.dedent(code), path)]


# --- false findings of issue 24, each fixed at its cause: the look-alike lints clean ----------------------------

SILENT = {
    "clip-grad-order: the step cited is in the other branch of `if use_amp`": """
        import torch.nn.functional as F
        from torch.nn.utils import clip_grad_norm_

        def train(model, optimizer, scaler, loader, use_amp):
            for x, y in loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                if use_amp:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                if use_amp:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
        """,
    "scaler-without-update: one update after stepping every optimizer": """
        def train_step(models, optimizers, scaler, batch):
            loss = sum(m(batch).mean() for m in models)
            scaler.scale(loss).backward()
            for opt in optimizers:
                scaler.step(opt)
            scaler.update()
            for opt in optimizers:
                opt.zero_grad()
        """,
    "eval-without-no-grad: a project's own @no_grad() decorator": """
        from .utils import no_grad

        @no_grad()
        def evaluate(model, loader):
            model.eval()
            correct = 0
            for x, y in loader:
                correct += (model(x).argmax(-1) == y).sum().item()
            return correct
        """,
    "inplace-on-saved-output: inside autograd.Function.forward": """
        import torch

        class ScaledTanh(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = torch.tanh(x)
                y *= 2.0
                ctx.save_for_backward(y)
                return y
        """,
    "dropout-missing-training: a prenet whose dropout is on by design": """
        import torch.nn as nn
        import torch.nn.functional as F

        class Prenet(nn.Module):
            def forward(self, x):
                for layer in self.layers:
                    x = F.dropout(F.relu(layer(x)), p=self.dropout)  # always applies dropout, also at inference
                return x
        """,
    "causal-mask-offset: a forget-gate decay zeroed above the diagonal, not an attention mask": """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class ForgetGates(nn.Module):
            def forward(self, q, k):
                gates = F.logsigmoid(q @ k.transpose(-1, -2))
                n = q.shape[-2]
                causal_mask = torch.ones((n, n), dtype=torch.bool, device=q.device).triu()
                gates = gates.masked_fill(causal_mask, 0.)
                return gates.cumsum(dim=-1)
        """,
    "optimizer-param-subset: a wrapper of the project's that holds the network as .model": """
        import torch
        import torch.nn.functional as F
        from mylib import EMAWrapper

        def train(net, loader):
            wrapper = EMAWrapper(net)
            optimizer = torch.optim.AdamW(wrapper.model.parameters(), lr=1e-4)
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(wrapper(x), y).backward()
                optimizer.step()
        """,
    "softmax-no-dim: 2-D and 4-D inputs, where the implicit dim 1 is the class or channel dim": """
        import torch
        import torch.nn.functional as F

        def pool(features, scores):
            weights = F.softmax(scores.view(scores.size(0), -1))
            return (features.flatten(1) * weights).sum(1)

        def segment(logits, n, c, h, w):
            return F.softmax(logits.reshape(n, c, h, w)), F.softmax(logits.flatten(1))

        def probe():
            return F.softmax(torch.randn(4, 10))
        """,
    "loss-accumulated-with-graph: a dict of outputs whose loss was detached": """
        def train(model, loader, optimizer):
            outputs = []
            for batch in loader:
                optimizer.zero_grad()
                output = model.training_step(batch)
                output["loss"].backward()
                optimizer.step()
                output["loss"] = output["loss"].detach()
                outputs.append(output)
            return outputs
        """,
    "loss-accumulated-with-graph: a test that keeps three losses to compare": """
        def test_loss_goes_down(model, optimizer, x):
            losses = []
            for _ in range(3):
                optimizer.zero_grad()
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
                losses.append(loss)
            assert losses[-1] < losses[0]
        """,
}


@pytest.mark.parametrize("code", SILENT.values(), ids=list(SILENT))
def test_false_findings_of_real_code_stay_silent(code):
    assert findings(code) == []


# their broken neighbours are still found

STILL_FOUND = [
    ("clip-grad-order", """
        from torch.nn.utils import clip_grad_norm_

        def train(model, optimizer, loader):
            for x, y in loader:
                optimizer.zero_grad()
                model(x).mean().backward()
                optimizer.step()
                clip_grad_norm_(model.parameters(), 1.0)  # BUG
        """),
    ("scaler-without-update", """
        def train_step(models, optimizers, scaler, batch):
            scaler.scale(sum(m(batch).mean() for m in models)).backward()
            for opt in optimizers:
                scaler.step(opt)  # BUG
        """),
    ("dropout-missing-training", """
        import torch.nn as nn
        import torch.nn.functional as F

        class Block(nn.Module):
            def forward(self, x):
                return F.dropout(self.fc(x), p=0.1)  # BUG  (on every call)
        """),
    ("causal-mask-offset", """
        import torch

        def attend(scores, n):
            causal_mask = torch.ones((n, n), dtype=torch.bool).triu()  # BUG: hides each token from itself
            return scores.masked_fill(causal_mask, 0.).masked_fill(causal_mask, float("-inf"))
        """),
    ("softmax-no-dim", """
        import torch.nn.functional as F

        def attend(scores, b, t):
            return F.softmax(scores.view(b, t, -1))  # BUG: 3-D, dim 0
        """),
    ("optimizer-param-subset", """
        import torch
        import torch.nn.functional as F
        from mylib import Classifier

        def train(loader):
            net = Classifier()
            optimizer = torch.optim.AdamW(net.head.parameters(), lr=1e-4)  # BUG
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(net(x), y).backward()
                optimizer.step()
        """),
    ("loss-accumulated-with-graph", """
        def train(model, optimizer, x):
            losses = []
            for _ in range(11):
                optimizer.zero_grad()
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
                losses.append(loss)  # BUG: 11 passes is more than a few
        """),
    ("inplace-on-saved-output", """
        import torch
        import torch.nn as nn

        class Gate(nn.Module):
            def forward(self, x):
                y = torch.tanh(x)
                y *= 2.0  # BUG
                return y
        """),
]


@pytest.mark.parametrize("rule, code", STILL_FOUND, ids=[r for r, _ in STILL_FOUND])
def test_the_broken_neighbours_of_those_look_alikes_are_still_found(rule, code):
    code = textwrap.dedent(code)
    line = next(n for n, text in enumerate(code.splitlines(), 1) if "# BUG" in text)
    assert (rule, line) in findings(code)
