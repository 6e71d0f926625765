"""gradpress for PyTorch: any model and training loop as a worker of a gradpress job.

    import gradpress.torch as gp
    opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                  model.named_parameters(), config="job.yaml",
                                  push="topk ratio=0.01 then=qsgd levels=16 error_feedback=true")
    gp.broadcast_parameters(model, opt)      # every worker starts from the server's weights
    for x, y in loader:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    print(opt.stats())                       # the last step's bytes and times

Identity from RANK, WORLD_SIZE and GRADPRESS_SERVER (or the arguments). docs/python.md.
"""
import torch  # noqa: F401  (loads LibTorch's Python bindings before gradpress._C)

try:
    from gradpress import _C  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "gradpress._C is not built or not on the path: build with CMake (python3-dev, "
        "pybind11-dev and python3-torch installed), then run with "
        "PYTHONPATH=build/python:python (docs/python.md)") from e

from gradpress.torch.data import worker_data
from gradpress.torch.optimizer import (DistributedOptimizer, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)

__all__ = ["DistributedOptimizer", "broadcast_object", "broadcast_optimizer_state",
           "broadcast_parameters", "worker_data"]
