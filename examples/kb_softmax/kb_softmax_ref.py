"""The reference for optiml: the forward of Model in softmax_task.py (a KernelBench-format task),
written by `optiml init --kernelbench`. The spec names it as `torch = ...`: optiml calls it with the
case's arrays as torch tensors on the GPU (aliasing its own buffers: no copy to the host) by
keyword; it sets the task's sizes from their shapes, builds the Model from get_init_inputs()
(seeded), loads its parameters from the tensors, and returns forward's outputs as tensors."""
from pathlib import Path

import torch

from optiml.draft.kbtask import load_task

TASK = Path(__file__).parent / 'softmax_task.py'
INPUTS = ['x']
PARAMS = {}
OUTPUTS = ['y']
DIMS = {'x': ['batch_size', 'dim'], 'y': ['batch_size', 'dim']}
DTYPES = {'x': 'float32', 'y': 'float32'}
SIZES = {'batch_size': 'batch_size', 'dim': 'dim'}


def _sized(tensors):
    """The task module executed at the sizes the tensors' shapes say (what it derives from them
    recomputed), and the tensors' device."""
    sizes = {size: int(tensors[arg]) for arg, size in SIZES.items() if arg in tensors}
    for name, dims in DIMS.items():
        if name in tensors:
            for size, n in zip(dims, tensors[name].shape):
                if size.isidentifier():
                    sizes[size] = int(n)
    arrays = [t for t in tensors.values() if isinstance(t, torch.Tensor)]
    return load_task(TASK, sizes), arrays[0].device


def _tensor(tensors, name, device):
    return tensors[name].to(device, getattr(torch, DTYPES[name]))


def reference(**tensors):
    task, device = _sized(tensors)
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).to(device)
    with torch.no_grad():
        state = model.state_dict()
        for name, key in PARAMS.items():
            state[key].copy_(_tensor(tensors, name, device).reshape(state[key].shape))
        out = model(*[_tensor(tensors, name, device) for name in INPUTS])
    return tuple(out) if isinstance(out, (tuple, list)) else out


# The baseline: the same forward as a user of PyTorch would run it. The Model is built once per
# shapes and device; at each call its parameters ARE the case's tensors (torch.func.functional_call,
# no copy), so a timed call is the forward alone.
_models = {}


def _prepared(tensors):
    task, device = _sized(tensors)
    key = (str(device), tuple(sorted((n, tuple(t.shape)) for n, t in tensors.items() if isinstance(t, torch.Tensor))))
    if key not in _models:
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs()).to(device)
        _models[key] = (model, {k: tuple(v.shape) for k, v in model.state_dict().items()}, {})
    model, shapes, compiled = _models[key]
    params = {key: _tensor(tensors, name, device).reshape(shapes[key]) for name, key in PARAMS.items()}
    return model, params, tuple(_tensor(tensors, name, device) for name in INPUTS), compiled


def _outputs(out):
    return tuple(out) if isinstance(out, (tuple, list)) else out


def baseline(**tensors):
    model, params, inputs, _ = _prepared(tensors)
    with torch.no_grad():
        return _outputs(torch.func.functional_call(model, params, inputs))


def baseline_compiled(**tensors):
    model, params, inputs, compiled = _prepared(tensors)
    if "fn" not in compiled:        # dynamic=False: optiml verifies at other sizes first (docs/spec.md)
        compiled["fn"] = torch.compile(lambda p, i: torch.func.functional_call(model, p, i), dynamic=False)
    with torch.no_grad():
        return _outputs(compiled["fn"](params, inputs))
