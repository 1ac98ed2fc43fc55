"""The reference for optiml: the forward of Model in 49_Max_reduction_over_a_dimension.py (a KernelBench-format task),
written by `optiml init --kernelbench`. The spec names it as `torch = ...`: optiml calls it with the
case's arrays as torch tensors on the GPU (aliasing its own buffers: no copy to the host) by
keyword; it sets the task's sizes from their shapes, builds the Model from get_init_inputs()
(seeded), loads its parameters from the tensors, and returns forward's outputs as tensors."""
import importlib.util
from pathlib import Path

import torch

TASK = Path(__file__).parent / '../tasks/49_Max_reduction_over_a_dimension.py'
INPUTS = ['x']
PARAMS = {}
OUTPUTS = ['out']
DIMS = {'x': ['batch_size', 'dim1', 'dim2'], 'out': ['batch_size', 'dim2']}
DTYPES = {'x': 'float32', 'out': 'float32'}
_task = None


def _module():
    global _task
    if _task is None:
        spec = importlib.util.spec_from_file_location("kernelbench_task", TASK)
        _task = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_task)
    return _task


def _sized(tensors):
    """The task module with its sizes set from the tensors' shapes, and the tensors' device."""
    task = _module()
    for name, dims in DIMS.items():
        if name in tensors:
            for size, n in zip(dims, tensors[name].shape):
                if size.isidentifier():
                    setattr(task, size, int(n))
    arrays = [t for t in tensors.values() if isinstance(t, torch.Tensor)]
    return task, arrays[0].device


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
