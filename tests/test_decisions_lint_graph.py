"""Decisions of lint's graph rules (detached losses, unreduced losses, losses summed with their graph), each pinned by
an input at its boundary: found by mutation testing."""
import pytest

from conftest import findings


# --- flow: a cut is followed through attributes, subscripts, lists and calls -----------------------------------

def test_a_cut_is_followed_through_an_attribute_of_the_cut_value():
    assert findings("""
        out = model(x).detach()
        loss = out.loss
        loss.backward()
        """) == [("detached-loss", 2)]


def test_a_cut_is_followed_through_a_subscript_of_the_cut_value():
    assert findings("""
        out = model(x).detach()
        loss = out[0]
        loss.backward()
        """) == [("detached-loss", 2)]


def test_a_cut_is_followed_through_the_elements_of_a_list():
    assert findings("""
        import torch
        a, b = model(x)
        loss = torch.stack([a.detach(), b.detach()]).sum()
        loss.backward()
        """) == [("detached-loss", 4)]


def test_a_cut_is_followed_through_the_arguments_of_a_torch_function():
    assert findings("""
        import torch
        out = model(x)
        loss = torch.mean(out.detach())
        loss.backward()
        """) == [("detached-loss", 4)]


def test_a_cut_is_followed_through_a_tensor_method_called_on_it():
    assert findings("""
        out = model(x)
        loss = out.detach().sum()
        loss.backward()
        """) == [("detached-loss", 3)]


# --- summands: a loss's terms are followed through at most 16 steps of names -----------------------------------

def renamed_loss(renames, term):
    """A loss `main + <term>` passed through `renames` plain renames before backward()."""
    lines = ["import torch.nn.functional as F",
             "main_loss = F.cross_entropy(model(x), y)",
             "aux_loss = F.cross_entropy(aux(x), y)",
             f"l0 = main_loss + {term}"]
    lines += [f"l{i + 1} = l{i}" for i in range(renames)]
    lines.append(f"l{renames}.backward()")
    return "\n".join(lines)


def test_a_detached_term_sixteen_steps_down_is_reported_and_one_further_is_not():
    # the terms of l0 sit at depth renames + 2: 16 is followed, 17 is past the limit
    assert findings(renamed_loss(14, "aux_loss.item()")) == [("detached-loss-term", 4)]
    assert findings(renamed_loss(15, "aux_loss.item()")) == []


# --- unreduced: a reduction='none' loss is followed through at most 12 steps of names --------------------------

def renamed_unreduced_loss(renames):
    lines = ["import torch.nn as nn",
             "criterion = nn.CrossEntropyLoss(reduction='none')",
             "l0 = criterion(model(x), y)"]
    lines += [f"l{i + 1} = l{i}" for i in range(renames)]
    lines.append(f"l{renames}.backward()")
    return "\n".join(lines)


def test_an_unreduced_loss_twelve_steps_down_is_reported_and_one_further_is_not():
    # the loss call sits at depth renames + 1: 12 is followed, 13 is past the limit
    assert findings(renamed_unreduced_loss(11)) == [("backward-non-scalar", 15)]
    assert findings(renamed_unreduced_loss(12)) == []


# --- loss-accumulated-with-graph ------------------------------------------------------------------------------

def summed_over(loop_header, summing="total += loss"):
    return f"""
        import torch.nn.functional as F

        total = 0.0
        {loop_header}
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            {summing}
        """


def test_a_loss_summed_behind_data_of_an_expression_is_not_reported():
    # `.data` cuts whatever it hangs on, even when that is no plain name
    assert findings(summed_over("for x, y in loader:", "total += (loss * x.size(0)).data")) == []


def test_a_loss_that_a_step_function_backpropagates_and_returns_counts_when_summed():
    # the step's loss is no loss call: it is a loss only because backward() runs on it
    assert findings("""
        def train_step(x, y):
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            return loss

        total = 0.0
        for x, y in loader:
            step_loss = train_step(x, y)
            total += step_loss
        """) == [("loss-accumulated-with-graph", 12)]



@pytest.mark.parametrize("loop_header, expected", [
    ("for _ in range(3):", []),
    ("for _ in range(0, 3):", []),
    ("for _ in range(10):", []),  # exactly few passes: left alone
    ("for _ in range(11):", [("loss-accumulated-with-graph", 10)]),
    ("for _ in range(0, 1000, 2):", [("loss-accumulated-with-graph", 10)]),  # the last argument is a step, not a count
])
def test_only_range_n_or_range_a_n_of_a_literal_few_passes_is_left_alone(loop_header, expected):
    assert findings(summed_over(loop_header)) == expected


def test_a_total_reset_as_the_last_statement_of_the_loop_is_not_a_running_total():
    # the reset's binding ends exactly where the loop ends
    assert findings("""
        import torch.nn.functional as F

        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss
            total = 0.0
        """) == []


def test_a_parameter_of_training_step_is_bound_where_the_step_begins():
    # in a training_step method the "loop" is the method itself, and its parameters are bound at its first position
    assert findings("""
        import torch.nn.functional as F

        class Module(LightningModule):
            def training_step(self, batch, batch_idx, total):
                x, y = batch
                loss = F.cross_entropy(self(x), y)
                total += loss
                return loss
        """) == []


def test_a_self_total_decayed_by_itself_is_still_a_running_total():
    assert findings("""
        import torch.nn.functional as F

        class Trainer:
            def fit(self, loader):
                self.running_loss = 0.0
                for x, y in loader:
                    self.optimizer.zero_grad()
                    loss = F.cross_entropy(self.model(x), y)
                    loss.backward()
                    self.optimizer.step()
                    self.running_loss = self.running_loss * 0.9
                    self.running_loss += loss
        """) == [("loss-accumulated-with-graph", 13)]
