# missing-zero-grad: each distributed-autograd context starts with no gradients
import torch.distributed.autograd as dist_autograd
import torch.nn.functional as F
from torch.distributed.optim import DistributedOptimizer


def run_trainer(model, loader, param_rrefs):
    opt = DistributedOptimizer(torch.optim.SGD, param_rrefs, lr=0.05)
    for data, target in loader:
        with dist_autograd.context() as context_id:
            output = model(data)
            loss = F.nll_loss(output, target)
            dist_autograd.backward(context_id, [loss])
            opt.step(context_id)


def run_local(model, loader, optimizer):
    for data, target in loader:
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()  # BUG: missing-zero-grad
        optimizer.step()
