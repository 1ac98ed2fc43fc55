"""Every implementation in the package has every member its protocol declares (the runner calls
them directly, with no getattr probes)."""
import inspect

import pytest

from optiml.build import Builder, NvccBuilder
from optiml.cluster import DaskBuilder, DaskHarness
from optiml.profiler.ncu import NcuProfiler
from optiml.profiler.types import Profiler
from optiml.runner.stages import BuildStage, CheckStage, ProfileStage, SanitizeStage, Stage
from optiml.verify.harness import Harness, SubprocessHarness
from optiml.verify.worker import CaseBuffers, DeviceCasePair, HostCase
from optiml.verify.worker_client import WorkerHarness


def members(protocol) -> set[str]:
    names = {n for n, v in vars(protocol).items() if not n.startswith("_") and callable(v)}
    return names | set(getattr(protocol, "__annotations__", {}))


def has(cls, name) -> bool:
    if hasattr(cls, name):
        return True
    # instance attributes set in __init__
    return f"self.{name} =" in inspect.getsource(cls) or f"self.{name}:" in inspect.getsource(cls)


@pytest.mark.parametrize("protocol,impls", [
    (Harness, [SubprocessHarness, WorkerHarness, DaskHarness]),
    (Builder, [NvccBuilder, DaskBuilder]),
    (Profiler, [NcuProfiler]),
    (Stage, [BuildStage, CheckStage, SanitizeStage, ProfileStage]),
    (CaseBuffers, [HostCase, DeviceCasePair]),          # the GPU child's: a CPU test is all that sees them here
])
def test_every_implementation_has_every_member(protocol, impls):
    need = members(protocol)
    assert need, protocol
    missing = [(c.__name__, n) for c in impls for n in sorted(need) if not has(c, n)]
    assert missing == []
