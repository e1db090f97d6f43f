"""Lets torchvision's pure-Python parts import on a CPU-only torch when its C++ ops cannot load.

PyPI's Linux torchvision wheel is built against CUDA torch; on torch+cpu its _C.so fails to load (libc10_cuda.so
missing), and torchvision 0.28 then fails at import: it registers a fake kernel for torchvision::nms, an op only
_C.so defines. Defining the two ops' schemas first lets the import go on; the real-scripts corpus never calls them
(datasets, transforms and models only). Nothing is done where torchvision is absent or its _C.so loads.
The runner puts this folder on PYTHONPATH for the doctor's process only.
"""
import importlib.util
import pathlib

_spec = importlib.util.find_spec("torchvision")
if _spec is not None:
    import torch

    try:
        torch.ops.load_library(str(pathlib.Path(_spec.origin).parent / "_C.so"))
    except OSError:
        _lib = torch.library.Library("torchvision", "DEF")  # kept alive by this module: deleting it undefines the ops
        _lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
