"""Checks of a loaded spec: its expressions at every size set, and its arguments against the kernel source."""
from __future__ import annotations

from typing import Mapping

from .. import dtypes as _dt
from .. import expr as _expr
from ..errors import ExprError, SpecError
from ..expr import show
from ..source import SourceInfo, dtype_of_c_type
from .model import MAX_ARRAY_BYTES, ArgSpec, TaskSpec, _name


def check_expressions(spec: TaskSpec, constants: Mapping | None = None) -> None:
    """Every shape, scalar and count evaluates at every size set (launch is checked with the source).

    Without the kernel's constants (``constants=None``), expressions that name something other
    than a size are checked later, against the source.
    """
    def ready(*exprs) -> bool:
        if constants is not None:
            return True
        names = set().union(*(_expr.names_in(e) for e in exprs))
        return names <= set(spec.timing_sizes)

    consts = constants or {}
    for sizes in spec.all_size_sets:
        for arg in spec.args:
            if arg.is_array and ready(*arg.shape):
                _check_shape(spec, arg, sizes, spec.shape(arg, sizes, consts))
            elif not arg.is_array and ready(arg.value):
                spec.scalar_value(arg, sizes, consts)
        for which in ("flops", "bytes"):
            if ready(getattr(spec, which)):
                n = spec.count(which, sizes, consts)
                if n is not None and n < 0:
                    raise SpecError(f"{spec.path}: counts.{which} = {show(getattr(spec, which))} is {n:.17g} at sizes {sizes}; "
                                    "it must be zero or positive.")


def _check_shape(spec: TaskSpec, arg: ArgSpec, sizes: Mapping[str, int], shape: tuple[int, ...]) -> None:
    """Every dimension is positive and the array fits in ``MAX_ARRAY_BYTES``."""
    field = f"{spec.path}: args.{_name(arg.name)}.shape"
    for j, n in enumerate(shape):
        if n <= 0:
            raise SpecError(f"{field}[{j}] = {show(arg.shape[j])} is {n} at sizes {sizes}; it must be positive.")
    nbytes = _dt.get(arg.dtype).itemsize
    for n in shape:
        nbytes *= n
        if nbytes > MAX_ARRAY_BYTES:
            raise SpecError(f"{field} = {show(list(arg.shape))} at sizes {sizes} needs more than 2**40 bytes "
                            f"(1 TiB) of {arg.dtype}; one array may hold at most that.")


def check_against_source(spec: TaskSpec, info: SourceInfo, kernel_path) -> None:
    """The entry exists, the arguments match its parameters, and the launch evaluates."""
    kern = info.kernel(spec.entry)
    if kern is None:
        found = ", ".join(k.name for k in info.kernels) or "none"
        raise SpecError(f"{spec.path}: kernel.entry {show(spec.entry)} is not a __global__ function in {kernel_path} (found: {found}).")
    if len(kern.params) != len(spec.args):
        raise SpecError(
            f"{spec.path}: args lists {len(spec.args)} arguments but {spec.entry} in {kernel_path} "
            f"takes {len(kern.params)} ({', '.join(p.name for p in kern.params)})."
        )
    for arg, p in zip(spec.args, kern.params):
        if arg.is_array != p.is_pointer:
            want = "a pointer" if arg.is_array else "a scalar"
            raise SpecError(
                f"{spec.path}: args.{_name(arg.name)} is {'an array (' + arg.role + ')' if arg.is_array else 'a scalar'} "
                f"but parameter {p.name!r} of {spec.entry} is {'a pointer' if p.is_pointer else 'a scalar'} ({p.type_text}); "
                f"make it {want} or fix the order."
            )
        c_dtype = dtype_of_c_type(p.base_type)
        if c_dtype is not None and c_dtype != arg.dtype and (
                _dt.get(c_dtype).itemsize != _dt.get(arg.dtype).itemsize
                or _dt.get(c_dtype).kind != _dt.get(arg.dtype).kind):   # int* as float32 has the size but not the bits
            raise SpecError(
                f"{spec.path}: args.{_name(arg.name)} has dtype {arg.dtype} but parameter {p.name!r} of {spec.entry} is "
                f"{p.type_text} ({c_dtype}); make the dtype {c_dtype} or fix the order."
            )
        if p.is_pointer and p.is_const and arg.role in ("output", "inout"):
            raise SpecError(f"{spec.path}: args.{_name(arg.name)} has role {arg.role} but parameter {p.name!r} is const ({p.type_text}).")
    try:
        check_expressions(spec, info.constants)
        for sizes in spec.all_size_sets:
            spec.resolve_launch(sizes, info)
    except ExprError as e:
        raise SpecError(str(e)) from None
