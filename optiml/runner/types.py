"""What the runner takes and gives: a :class:`Candidate` in, an :class:`Evaluation` out."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace

from ..build import BuildResult, Resources
from ..profiler.types import ProfileResult
from ..spec import Launch
from ..status import Status
from ..verify.harness import FunctionRef, HarnessResult
from ..verify.sanitizer import SanitizeResult


@dataclass(frozen=True)
class Candidate:
    source: str
    flags: tuple[str, ...] = ()        # extra nvcc flags on top of the spec's
    name: str = "kernel.cu"            # file name shown in compiler messages
    function: FunctionRef | None = None   # a [baseline]: this function is verified and timed, not the source
                                          # (which is built for the sizes' constants: the seed's)


@dataclass
class Evaluation:
    """Everything one candidate's evaluation produced; ``status`` says how it ended (a failure is
    a status with its ``message``, never an exception)."""
    status: str
    message: str = ""
    build: BuildResult | None = None
    harness: HarnessResult | None = None
    launch: Launch | None = None       # at the timing size
    resources: Resources | None = None
    seed: int | None = None
    median_ms: float | None = None
    baseline_ms: float | None = None   # the baseline's median, timed interleaved (a job with a baseline)
    vendor_ms: float | None = None     # the vendor function's median, timed interleaved (a job with a vendor)
    gflops: float | None = None
    gbps: float | None = None
    wall_s: float = 0.0
    stage_s: dict[str, float] = field(default_factory=dict)
    profile: ProfileResult | None = None   # verified candidates, when a profiler runs
    speed_of_light: dict | None = None     # set when the first timing beat the device's physical bound
    sanitize: SanitizeResult | None = None   # compute-sanitizer's verdict, when it ran
    later: Future | None = field(default=None, repr=False, compare=False)
    # set when a background stage (the sanitizer of each new best) runs after this result was given
    # out: a future of the Evaluation once that stage is done (a status may change: ``unsafe``)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def fail(self, status: Status, message: str) -> "Evaluation":
        self.status, self.message = status, message
        return self

    def snapshot(self) -> "Evaluation":
        """A copy to give out while a background stage goes on with this one."""
        return replace(self, stage_s=dict(self.stage_s), later=None)

    def to_dict(self) -> dict:
        d = asdict(replace(self, later=None))
        d.pop("later", None)
        d["status"] = str(self.status)
        d["build"] = self.build.to_dict() if self.build else None
        d["harness"] = self.harness.to_dict() if self.harness else None
        d["sanitize"] = self.sanitize.to_dict() if self.sanitize is not None else None
        if self.profile is not None:
            p = self.profile
            d["profile"] = {"status": p.status.value, "message": p.message, "metrics": p.metrics,
                            "diagnosis": p.diagnosis, "wall_s": p.wall_s, "dropped_metrics": p.dropped_metrics}
        return d
