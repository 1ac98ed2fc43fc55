"""Python functions on GPU arrays (the GPU child's side): a spec's ``[reference] torch = ...`` or
``cupy = ...``, and a ``[baseline]``.

:class:`DeviceFunction` calls the user's function with the case's device buffers as torch tensors
or CuPy arrays that alias them (``__cuda_array_interface__``: no copy, no trip to the host), the
scalars as Python numbers, on the worker's own stream (an external stream of the framework), and
copies what it returns into the case's output buffers on the device, where the comparison runs.
The worker's context is the device's primary context, the one the frameworks use, so the
pointers are valid on both sides. Imported by the GPU child only; torch and CuPy are imported
only when a spec names them.
"""
from __future__ import annotations

import functools
import importlib.util
import math

import numpy as np

from .. import dtypes as _dt

INSTALL = {"torch": "pip install torch (a CUDA build)", "cupy": "pip install cupy-cuda12x (or the build for your CUDA)"}


class FrameworkMissing(Exception):
    """torch or CuPy is not importable in the GPU child: one sentence saying what to install."""


def import_framework(kind: str):
    try:
        if kind == "torch":
            import torch
        else:
            import cupy as torch      # noqa: N813 - the module, whichever it is
    except ImportError:
        raise FrameworkMissing(f"the spec's {kind} function needs {'PyTorch' if kind == 'torch' else 'CuPy'}, "
                               f"which is not installed where the GPU work runs ({INSTALL[kind]})") from None
    return torch


def load_function(path, name: str):
    modspec = importlib.util.spec_from_file_location(f"optiml_user_{path.stem}", path)
    mod = importlib.util.module_from_spec(modspec)
    modspec.loader.exec_module(mod)
    fn = getattr(mod, name, None)
    if fn is None or not callable(fn):
        raise AttributeError(f"{path.name} has no function {name!r}")
    return fn


def returned_values(result, names: list[str]) -> list:
    """What a reference or baseline returned, one value per output/inout in ``names``' order: one
    value, a tuple or list in that order, or a dict by name; a ValueError saying what is wrong."""
    if isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise ValueError(f"the reference returned no value for {', '.join(missing)}")
        values = [result[n] for n in names]
    elif isinstance(result, (tuple, list)):
        values = list(result)
    else:
        values = [result]
    if len(values) != len(names):
        raise ValueError(f"the reference returned {len(values)} outputs, the spec has {len(names)}")
    return values


class _Cai:
    """A device buffer as ``__cuda_array_interface__`` (version 3, C order, no stream to wait on)."""

    def __init__(self, ptr: int, shape: tuple, typestr: str):
        self.__cuda_array_interface__ = {"shape": tuple(int(s) for s in shape), "typestr": typestr,
                                         "data": (int(ptr), False), "version": 3, "strides": None, "stream": None}


def case_buffers(spec, case) -> tuple[dict[str, tuple[int, tuple, str]], dict]:
    """(name -> (device pointer, shape, dtype)) of a case's arrays and its scalars: a FilledCase
    (drawn on the device) or a DeviceCase (uploaded from the host)."""
    arrays, meta = {}, getattr(case, "meta", None)
    for a in spec.args:
        if not a.is_array:
            continue
        shape = meta[a.name][2] if meta is not None else case.data.arrays[a.name].shape
        arrays[a.name] = (int(case.bufs[a.name]), tuple(shape), a.dtype)
    scalars = case.scalars if meta is not None else case.data.scalars
    return arrays, dict(scalars)


class DeviceFunction:
    """The user's function on GPU arrays (``kind``: "torch" or "cupy"), bound to one device and stream."""

    def __init__(self, kind: str, path, name: str, gpu):
        self.kind, self.gpu = kind, gpu
        self.fw = import_framework(kind)
        self.fn = load_function(path, name)
        if kind == "torch":
            self.device = self.fw.device("cuda", gpu.index)
            self.stream = self.fw.cuda.ExternalStream(gpu.stream.handle, device=self.device)
        else:
            self.device = self.fw.cuda.Device(gpu.index)
            self.stream = self.fw.cuda.ExternalStream(gpu.stream.handle)

    # -- arrays -----------------------------------------------------------------------------
    def view(self, ptr: int, shape: tuple, dtype: str):
        """The device buffer as the framework's array, aliasing it."""
        if math.prod(shape) == 0:
            return self._empty(shape, dtype)
        if dtype == "bfloat16":
            if self.kind == "cupy":
                raise TypeError("CuPy has no bfloat16 arrays; use a torch function for bfloat16 arguments")
            t = self.fw.as_tensor(_Cai(ptr, shape, "<i2"), device=self.device)
            return t.view(self.fw.bfloat16)
        typestr = np.dtype(_dt.get(dtype).storage).str
        if self.kind == "torch":
            return self.fw.as_tensor(_Cai(ptr, shape, typestr), device=self.device)
        return self.fw.asarray(_Cai(ptr, shape, typestr))

    def _empty(self, shape, dtype):
        if self.kind == "torch":
            return self.fw.empty(shape, dtype=getattr(self.fw, dtype), device=self.device)
        return self.fw.empty(shape, dtype=np.dtype(_dt.get(dtype).storage))

    def _into(self, dst, value, name: str) -> None:
        """``value`` (what the function returned for output ``name``) written into ``dst``."""
        fw = self.fw
        if self.kind == "torch":
            v = value if isinstance(value, fw.Tensor) else fw.as_tensor(np.asarray(value), device=self.device)
            if v.numel() != dst.numel():
                raise ValueError(f"the reference's {name} has {v.numel()} elements, the spec's shape "
                                 f"{tuple(dst.shape)} has {dst.numel()}")
            if v.data_ptr() != dst.data_ptr():
                dst.copy_(v.detach().reshape(dst.shape).to(device=self.device, dtype=dst.dtype))
        else:
            v = fw.asarray(value)
            if v.size != dst.size:
                raise ValueError(f"the reference's {name} has {v.size} elements, the spec's shape "
                                 f"{tuple(dst.shape)} has {dst.size}")
            if v.data.ptr != dst.data.ptr:
                dst[...] = v.reshape(dst.shape).astype(dst.dtype, copy=False)

    # -- calling ----------------------------------------------------------------------------
    def arguments(self, spec, case) -> tuple[dict, dict]:
        """(keyword arguments: the inputs and inouts as aliasing arrays, the scalars; the outputs' and
        inouts' arrays by name)."""
        arrays, scalars = case_buffers(spec, case)
        kwargs, outs = {}, {}
        for a in spec.args:
            if a.role == "scalar":
                kwargs[a.name] = scalars[a.name].item() if hasattr(scalars[a.name], "item") else scalars[a.name]
                continue
            v = self.view(*arrays[a.name])
            if a.role in ("input", "inout") or (a.role == "output" and a.name in self.params):
                kwargs[a.name] = v          # an output only to a function that names it (to write it in place)
            if a.role in ("output", "inout"):
                outs[a.name] = v
        return kwargs, outs

    @functools.cached_property
    def params(self) -> set:
        """The names the function takes (read once)."""
        import inspect

        try:
            return set(inspect.signature(self.fn).parameters)
        except (TypeError, ValueError):
            return set()

    def call(self, spec, kwargs: dict, outs: dict) -> None:
        """The function once on the worker's stream, its results written into ``outs``; the
        stream is synchronised after (the comparison kernels run next)."""
        with self._on_stream():
            result = self.fn(**kwargs)
            self.write(spec, result, outs)
        self.gpu.stream.synchronize()

    def write(self, spec, result, outs: dict) -> None:
        names = [a.name for a in spec.args if a.role in ("output", "inout")]
        if result is None and all(a.role == "inout" or a.name in self.params for a in spec.args if a.name in names):
            return                                  # it wrote its outputs (and inouts) in place
        if result is None:
            raise ValueError(f"the function returned nothing; return {', '.join(names)} or take "
                             f"{'it' if len(names) == 1 else 'them'} as parameters to write in place")
        for n, v in zip(names, returned_values(result, names)):
            self._into(outs[n], v, n)

    def __call__(self, spec, case) -> None:
        """Run on ``case``: its outputs hold the function's results afterwards."""
        kwargs, outs = self.arguments(spec, case)
        self.call(spec, kwargs, outs)

    def _on_stream(self):
        if self.kind == "torch":
            return self.fw.cuda.stream(self.stream)
        return self.stream
