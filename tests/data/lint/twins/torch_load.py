# torch-load-unsafe: only an explicit weights_only=False
import torch


def resume(path, model, optimizer):
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    extra = torch.load(path + ".extra", weights_only=False)  # BUG: torch-load-unsafe
    optimizer.load_state_dict(extra)
