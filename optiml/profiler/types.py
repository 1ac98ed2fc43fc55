"""What a profiling attempt returns: failure is data, not an exception.

A profile that could not be taken (no ``ncu`` on the machine, no permission to read the GPU's
performance counters, a metric this ncu does not know, a timeout) is a :class:`ProfileResult`
with a status other than ``ok`` and one sentence saying why; the search records it and goes on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

MetricValue = float | str | None
"""A value in a metrics dict: a number, a label (e.g. the occupancy limiters) or missing."""


class ProfileStatus(str, Enum):
    """How a profiling attempt ended."""

    OK = "ok"
    NCU_MISSING = "ncu_missing"
    PERMISSION_DENIED = "permission_denied"
    TIMEOUT = "timeout"
    REPLAY_FAILED = "replay_failed"
    UNKNOWN_METRIC = "unknown_metric"
    ERROR = "error"


@dataclass(frozen=True)
class ProfileResult:
    """The outcome of profiling one kernel launch.

    ``metrics`` holds the catalogue's plain keys (see :mod:`optiml.profiler.metrics`),
    ``diagnosis`` a few plain sentences, ``raw_csv`` the ncu CSV text the numbers came from
    (kept so the metrics can be recomputed without a GPU), ``wall_s`` the wall time of the
    ncu process and ``dropped_metrics`` the requested names this ncu did not know.
    """

    status: ProfileStatus
    message: str = ""
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    diagnosis: list[str] = field(default_factory=list)
    raw_csv: str | None = None
    wall_s: float | None = None
    dropped_metrics: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the profile was taken."""
        return self.status is ProfileStatus.OK

    @classmethod
    def failure(
        cls,
        status: ProfileStatus,
        message: str,
        *,
        raw_csv: str | None = None,
        wall_s: float | None = None,
        dropped_metrics: list[str] | None = None,
    ) -> ProfileResult:
        """A result for a profile that could not be taken; ``status`` must not be ``ok``."""
        if status is ProfileStatus.OK:
            raise ValueError("ProfileResult.failure needs a failing status, not ok")
        return cls(
            status=status,
            message=message,
            raw_csv=raw_csv,
            wall_s=wall_s,
            dropped_metrics=list(dropped_metrics or []),
        )


class Profiler(Protocol):
    """Profiles verified candidates' GPU jobs (:class:`optiml.verify.harness.HarnessJob`)."""

    def profile_batch(self, jobs: list, device_name: str = "", gpu_lock=None, on_gpu_done=None,
                      prestart: bool = False) -> list[ProfileResult]:
        """One result per job, in order. ``gpu_lock`` is held while the candidates run under the
        profiler, ``on_gpu_done`` called once they are off the GPU; with ``prestart`` the next
        batch's process may start ahead."""

    def close(self) -> None:
        """Stop any process started ahead."""
