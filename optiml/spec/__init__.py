"""The task spec: how to run, check and time a kernel (``kernel.toml`` beside ``kernel.cu``).

See ``docs/spec.md`` for the format. Loading validates everything that can be checked
without a GPU: types, names, every shape and the launch geometry at every size set, and
the arguments against the kernel's parameters. Each problem is one sentence that names
the file and the field.
"""
from .arrays import spec_data_from_arrays, spec_from_arrays, spec_from_data, to_toml
from .checks import check_against_source, check_expressions
from .load import find_spec, load_spec, load_task, parse_spec, read_kernel
from .model import (DISTS, MAX_ARRAY_BYTES, MAX_BLOCK, MAX_GRID, MAX_SHARED_MEM, MAX_SIZE, MIN_TRIALS, ROLES, ArgSpec,
                    Init, Launch, LaunchSpec, Reference, TaskSpec, TimingConfig, Tolerance, VerifyConfig)
from ..errors import SpecError

__all__ = ["ArgSpec", "DISTS", "Init", "Launch", "LaunchSpec", "MAX_ARRAY_BYTES", "MAX_BLOCK", "MAX_GRID",
           "MAX_SHARED_MEM", "MAX_SIZE", "MIN_TRIALS", "ROLES", "Reference", "SpecError", "TaskSpec", "TimingConfig",
           "Tolerance", "VerifyConfig", "check_against_source", "check_expressions", "find_spec", "load_spec", "load_task", "read_kernel",
           "parse_spec", "spec_data_from_arrays", "spec_from_arrays",
           "spec_from_data", "to_toml"]
