"""Distributed autograd training in the style of the pytorch/examples RPC tutorials (our own text)."""
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.distributed.optim import DistributedOptimizer


class TrainerNet(nn.Module):
    def __init__(self, ps_rref):
        super().__init__()
        self.param_server_rref = ps_rref

    def get_global_param_rrefs(self):
        return rpc.rpc_sync(self.param_server_rref.owner(), get_param_rrefs, args=(self.param_server_rref,))

    def forward(self, x):
        return rpc.rpc_sync(self.param_server_rref.owner(), remote_forward, args=(self.param_server_rref, x))


def run_training_loop(rank, train_loader, ps_rref):
    net = TrainerNet(ps_rref)
    param_rrefs = net.get_global_param_rrefs()
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=0.03)
    for i, (data, target) in enumerate(train_loader):
        with dist_autograd.context() as cid:
            model_output = net(data)
            loss = F.nll_loss(model_output, target)
            if i % 5 == 0:
                print(f"Rank {rank} training batch {i} loss {loss.item()}")
            dist_autograd.backward(cid, [loss])
            assert remote_method(TrainerNet.get_global_param_rrefs, net) != {}
            opt.step(cid)
    print("Training complete!")


def get_accuracy(test_loader, model):
    model.eval()
    correct_sum = 0
    with torch.no_grad():
        for data, target in test_loader:
            out = model(data)
            pred = out.argmax(dim=1, keepdim=True)
            correct_sum += pred.eq(target.view_as(pred)).sum().item()
    return correct_sum / len(test_loader.dataset)
