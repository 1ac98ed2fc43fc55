"""The reference for optiml: the forward of Model in tasks/30_Gemm_GroupNorm_Hardtanh.py
(a KernelBench-format task), written by hand in the format of the references `optiml init
--kernelbench` writes, which fails on this task (README.md). The spec names it as `torch = ...`:
optiml calls it with the case's arrays as torch tensors on the GPU (aliasing its own buffers: no copy
to the host) and its scalars, by keyword; it runs the task module anew at the sizes their shapes and
the scalars in SCALARS say (num_groups, which no shape says), builds the Model from
get_init_inputs() (seeded), loads its parameters from the tensors, and returns forward's outputs as
tensors."""
import re
import sys
import types
from pathlib import Path

import torch

TASK = Path(__file__).parent / '../tasks/30_Gemm_GroupNorm_Hardtanh.py'
INPUTS = ['x']
PARAMS = {'weight': 'gemm.weight', 'bias': 'gemm.bias', 'gn_weight': 'group_norm.weight', 'gn_bias': 'group_norm.bias'}
OUTPUTS = ['out']
DIMS = {'x': ['batch_size', 'in_features'], 'weight': ['out_features', 'in_features'], 'bias': ['out_features'], 'gn_weight': ['out_features'], 'gn_bias': ['out_features'], 'out': ['batch_size', 'out_features']}
DTYPES = {'x': 'float32', 'weight': 'float32', 'bias': 'float32', 'gn_weight': 'float32', 'gn_bias': 'float32', 'out': 'float32'}
SCALARS = {'num_groups': 'num_groups'}  # the kernel's scalar arguments that are sizes no shape says
_tasks = {}


def _module(sizes):
    """The task module executed with its sizes' assignments replaced by ``sizes``."""
    key = tuple(sorted(sizes.items()))
    if key not in _tasks:
        text = TASK.read_text()
        for name, n in sizes.items():
            text = re.sub(rf"(?m)^{name}(\s*)=(\s*)\d+", f"{name} = {n}", text)
        mod = types.ModuleType(f"kernelbench_task_{abs(hash(key))}")
        mod.__file__ = str(TASK)
        sys.modules[mod.__name__] = mod             # torch.compile finds the module of Model.forward
        exec(compile(text, str(TASK), "exec"), mod.__dict__)
        _tasks[key] = mod
    return _tasks[key]


def _sized(tensors):
    """The task module at the sizes the tensors' shapes and the scalars say, and the tensors' device."""
    sizes = {}
    for name, dims in DIMS.items():
        if name in tensors:
            for size, n in zip(dims, tensors[name].shape):
                if size.isidentifier():
                    sizes[size] = int(n)
    for name, size in SCALARS.items():
        if name in tensors:
            sizes[size] = int(tensors[name])
    arrays = [t for t in tensors.values() if isinstance(t, torch.Tensor)]
    return _module(sizes), arrays[0].device


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
    key = (str(device), task.__name__,
           tuple(sorted((n, tuple(t.shape)) for n, t in tensors.items() if isinstance(t, torch.Tensor))))
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
