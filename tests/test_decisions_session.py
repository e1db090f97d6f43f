"""Decisions of the trainer callbacks' shared session (ml_debug/integrations/_session.py) and of the Lightning
callback's end of training (issue 27)."""
from types import SimpleNamespace

import pytest
import torch

from ml_debug.integrations._session import Session


def test_add_loss_sums_the_token_counts_of_the_micro_batches():
    """Token counts given with each micro-batch's loss add up to the step's."""
    session = Session(None, None, None, monitor=False, guard=False, nan_watch=False)
    session.add_loss(torch.tensor(1.0), tokens=3)
    session.add_loss(torch.tensor(2.0), tokens=4)
    assert session.tokens == 7


@pytest.mark.parametrize("started", [True, False])
def test_the_lightning_callback_closes_its_session_at_the_end_of_training_and_has_none_to_close_before_it_starts(started):
    pytest.importorskip("lightning")
    from ml_debug.integrations.lightning import MLDebugCallback
    closed = []
    callback = MLDebugCallback()
    if started:
        callback.session = SimpleNamespace(close=lambda: closed.append(True))
    callback.on_train_end(None, None)  # a run stopped before on_train_start ran has no session: nothing to close
    assert closed == ([True] if started else [])
