"""The reference for optiml: the forward of Model in rmsnorm_task.py (a KernelBench-format task),
written by `optiml init --kernelbench`. The spec names it as `torch = ...`: optiml calls it with the
case's arrays as torch tensors on the GPU (aliasing its own buffers: no copy to the host) by
keyword; it sets the task's sizes from their shapes, builds the Model from get_init_inputs()
(seeded), loads its parameters from the tensors, and returns forward's outputs as tensors."""
import importlib.util
from pathlib import Path

import torch

TASK = Path(__file__).parent / 'rmsnorm_task.py'
INPUTS = ['x']
PARAMS = {'weight': 'weight'}
OUTPUTS = ['y']
DIMS = {'x': ['batch_size', 'features'], 'weight': ['features'], 'y': ['batch_size', 'features']}
DTYPES = {'x': 'float32', 'weight': 'float32', 'y': 'float32'}
_task = None


def _module():
    global _task
    if _task is None:
        spec = importlib.util.spec_from_file_location("kernelbench_task", TASK)
        _task = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_task)
    return _task


def reference(**tensors):
    task = _module()
    for name, dims in DIMS.items():
        if name in tensors:
            for size, n in zip(dims, tensors[name].shape):
                if size.isidentifier():
                    setattr(task, size, int(n))
    device = next(iter(tensors.values())).device

    def tensor(name):
        return tensors[name].to(device, getattr(torch, DTYPES[name]))

    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).to(device)
    with torch.no_grad():
        state = model.state_dict()
        for name, key in PARAMS.items():
            state[key].copy_(tensor(name).reshape(state[key].shape))
        out = model(*[tensor(name) for name in INPUTS])
    return tuple(out) if isinstance(out, (tuple, list)) else out
