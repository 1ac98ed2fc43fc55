"""Host-side data for one case: inputs drawn from a seeded generator, poisoned outputs,
scalar values. Pure numpy, so it is tested without a GPU."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as _dt
from ..spec import ArgSpec, Init, TaskSpec


@dataclass
class CaseData:
    """Buffers (storage layout) for every array argument and values for scalars, in spec order."""
    arrays: dict[str, np.ndarray]
    scalars: dict[str, int | float]


def draw(init: Init, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    kind = _dt.get(dtype).kind
    if init.dist == "constant":
        values = np.full(shape, init.value, dtype=np.float64 if kind == "float" else np.int64)
    elif init.dist == "integers":
        values = rng.integers(int(init.low), int(init.high), size=shape, dtype=np.int64)
    elif init.dist == "uniform":
        gen_dtype = np.float64 if dtype == "float64" else np.float32
        values = rng.random(size=shape, dtype=gen_dtype) * gen_dtype(init.high - init.low) + gen_dtype(init.low)
        if kind != "float":
            values = np.floor(values)
    elif init.dist == "normal":
        gen_dtype = np.float64 if dtype == "float64" else np.float32
        values = rng.standard_normal(size=shape, dtype=gen_dtype) * gen_dtype(init.std) + gen_dtype(init.mean)
        if kind != "float":
            values = np.rint(values)
    else:  # the spec loader rejects anything else
        raise ValueError(init.dist)
    if kind == "bool":
        values = values != 0
    return _dt.to_storage(values, dtype)


def poisoned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An output buffer holding the poison pattern's exact bytes in every element (filled as
    unsigned integers, since numpy would turn a bool 0xA5 into 0x01 and may quiet a NaN)."""
    pattern = _dt.poison_pattern(dtype)
    bits = np.dtype(f"u{pattern.itemsize}")
    return np.full(shape, pattern.view(bits)[0], dtype=bits).view(pattern.dtype)


def make_case(spec: TaskSpec, sizes: dict[str, int], seed: int, constants: dict | None = None) -> CaseData:
    """Fresh inputs for one case. Each argument gets its own stream derived from ``seed`` so that
    adding an argument does not change the others' values."""
    constants = constants or {}
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, int | float] = {}
    for i, arg in enumerate(spec.args):
        if arg.role == "scalar":
            scalars[arg.name] = spec.scalar_value(arg, sizes, constants)
            continue
        shape = spec.shape(arg, sizes, constants)
        if arg.role == "output":
            arrays[arg.name] = poisoned(shape, arg.dtype)
        else:
            rng = np.random.default_rng([seed, i])
            arrays[arg.name] = draw(arg.init, shape, arg.dtype, rng)
    return CaseData(arrays, scalars)


def scalar_numpy(arg: ArgSpec, value) -> np.generic:
    """A kernel scalar argument with the exact C type."""
    if arg.dtype == "bfloat16":
        return np.uint16(_dt.float32_to_bf16_bits(np.array([value], np.float32))[0])
    if arg.dtype == "float16":
        return np.float16(value).view(np.uint16)
    if arg.dtype == "bool":
        return np.uint8(bool(value))
    return np.dtype(_dt.get(arg.dtype).storage).type(value)
