"""The element types a task spec can name, and their storage in numpy.

numpy has no bfloat16: it is stored as uint16 bit patterns and converted to and from
float32 here (round to nearest even).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    storage: str          # numpy dtype of the buffer
    kind: str             # "float" or "int" or "bool"
    itemsize: int
    c_names: tuple[str, ...]


DTYPES: dict[str, DType] = {
    d.name: d
    for d in [
        DType("float64", "float64", "float", 8, ("double",)),
        DType("float32", "float32", "float", 4, ("float",)),
        DType("float16", "float16", "float", 2, ("half", "__half")),
        DType("bfloat16", "uint16", "float", 2, ("__nv_bfloat16", "nv_bfloat16")),
        DType("int64", "int64", "int", 8, ("int64_t", "long long")),
        DType("int32", "int32", "int", 4, ("int", "int32_t")),
        DType("int16", "int16", "int", 2, ("short", "int16_t")),
        DType("int8", "int8", "int", 1, ("int8_t", "char", "signed char")),
        DType("uint64", "uint64", "int", 8, ("uint64_t", "unsigned long long", "size_t")),
        DType("uint32", "uint32", "int", 4, ("unsigned", "unsigned int", "uint32_t")),
        DType("uint16", "uint16", "int", 2, ("unsigned short", "uint16_t")),
        DType("uint8", "uint8", "int", 1, ("uint8_t", "unsigned char")),
        DType("bool", "bool", "bool", 1, ("bool",)),
    ]
}

# Documented default tolerances: |out - ref| <= atol + rtol * |ref|, elementwise.
# float32 allows for a different summation order than the reference (a tiled or
# reassociated kernel), not for lower-precision arithmetic such as TF32.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-9),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}

# The relative check's default bound on ||out - ref|| / ||ref|| (floating-point outputs; integers and
# bool are compared exactly). Ten times the elementwise rtol for float32 (an honest kernel the
# elementwise check passes lands far under it: a different summation order near 1e-6, TF32 near
# 5e-4 for reductions up to 1e6 terms accumulated in float32), the rtol for the half types.
# It is measured against the reference's own magnitude, so unlike atol it holds at every size.
DEFAULT_REL_RMS: dict[str, float] = {
    "float64": 1e-7,
    "float32": 1e-3,
    "float16": 1e-2,
    "bfloat16": 2e-2,
}


def get(name: str) -> DType:
    return DTYPES[name]


# The largest finite bfloat16: 0x7F7F (numpy has no bfloat16 to ask).
BF16_MAX = 3.3895313892515355e38


def value_range(name: str) -> tuple[int | float, int | float]:
    """The smallest and largest value an element of ``name`` holds (floats: the finite range)."""
    d = DTYPES[name]
    if d.kind == "bool":
        return 0, 1
    if d.kind == "int":
        info = np.iinfo(d.storage)
        return int(info.min), int(info.max)
    hi = BF16_MAX if name == "bfloat16" else float(np.finfo(d.storage).max)
    return -hi, hi


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even) and return the uint16 bit patterns."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_bits_to_float32(b: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values (any numeric numpy array) to the buffer layout of ``dtype``."""
    if dtype == "bfloat16":
        return float32_to_bf16_bits(np.asarray(values, dtype=np.float32))
    return np.ascontiguousarray(values, dtype=DTYPES[dtype].storage)


def to_values(buffer: np.ndarray, dtype: str) -> np.ndarray:
    """A buffer of ``dtype`` to numbers numpy can compute with (bfloat16 -> float32)."""
    if dtype == "bfloat16":
        return bf16_bits_to_float32(buffer)
    return buffer


def poison_pattern(dtype: str) -> np.ndarray:
    """One element that marks 'never written': a NaN with a payload for floats, a sentinel for ints."""
    if dtype == "float64":
        return np.array([0x7FF8DEADBEEFBAD0], dtype=np.uint64).view(np.float64)
    if dtype == "float32":
        return np.array([0x7FC0BAD5], dtype=np.uint32).view(np.float32)
    if dtype == "float16":
        return np.array([0x7E5A], dtype=np.uint16).view(np.float16)
    if dtype == "bfloat16":
        return np.array([0x7FDA], dtype=np.uint16)
    if dtype == "bool":
        return np.array([0xA5], dtype=np.uint8).view(np.bool_)
    info = np.iinfo(DTYPES[dtype].storage)
    # an unlikely value that fits: 0x5A repeated, or the type's minimum for signed types
    v = info.min + 0x5A5A % (info.max + 1) if info.min < 0 else info.max - 0x5A5A % (info.max + 1)
    return np.array([v], dtype=DTYPES[dtype].storage)
