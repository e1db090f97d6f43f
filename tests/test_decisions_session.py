"""Decisions of the trainer callbacks' shared session (ml_debug/integrations/_session.py) (issue 27)."""
import torch

from ml_debug.integrations._session import Session


def test_add_loss_sums_the_token_counts_of_the_micro_batches():
    """Token counts given with each micro-batch's loss add up to the step's."""
    session = Session(None, None, None, monitor=False, guard=False, nan_watch=False)
    session.add_loss(torch.tensor(1.0), tokens=3)
    session.add_loss(torch.tensor(2.0), tokens=4)
    assert session.tokens == 7
