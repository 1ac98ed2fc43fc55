"""The reference for optiml: the forward of Model in rmsnorm_task.py (a KernelBench-format task),
written by `optiml init --kernelbench`. Called with the spec's input arrays (NumPy) by keyword; it
sets the task's sizes from their shapes, builds the Model from get_init_inputs() (seeded), loads its
parameters from the arrays, and returns forward's outputs as NumPy arrays."""
import importlib.util
from pathlib import Path

import numpy as np
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


def reference(**arrays):
    task = _module()
    for name, dims in DIMS.items():
        if name in arrays:
            for size, n in zip(dims, np.shape(arrays[name])):
                if size.isidentifier():
                    setattr(task, size, int(n))
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def tensor(name):
        return torch.from_numpy(np.ascontiguousarray(arrays[name])).to(device, getattr(torch, DTYPES[name]))

    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).to(device)
    with torch.no_grad():
        state = model.state_dict()
        for name, key in PARAMS.items():
            state[key].copy_(tensor(name).reshape(state[key].shape))
        out = model(*[tensor(name) for name in INPUTS])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(o.detach().cpu().float().numpy() if o.dtype == torch.bfloat16 else o.detach().cpu().numpy()
                 for o in outs)
