"""What the search knows of one evaluated candidate: :class:`Result`, the one record its
evaluator returns, its nodes hold, and a trace store gives back on resume."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..status import Status


@dataclass(frozen=True)
class Result:
    status: str
    message: str = ""
    median_ms: float | None = None
    spread: float | None = None               # the timing's relative noise (IQR / median)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    diagnosis: tuple[str, ...] = ()
    resources: Mapping[str, Any] = field(default_factory=dict)   # ptxas: registers, shared memory, spills
    stage_s: Mapping[str, float] = field(default_factory=dict)
    speed_of_light: Mapping[str, Any] | None = None
    sanitize: Mapping[str, Any] | None = None  # compute-sanitizer's verdict (status, tools, finding), when it ran

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_dict(self) -> dict:
        """Plain JSON-able values (the form stored with a node)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["status"] = str(self.status)
        d["metrics"], d["resources"], d["stage_s"] = dict(self.metrics), dict(self.resources), dict(self.stage_s)
        d["diagnosis"] = list(self.diagnosis)
        d["speed_of_light"] = dict(self.speed_of_light) if self.speed_of_light is not None else None
        d["sanitize"] = dict(self.sanitize) if self.sanitize is not None else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Result":
        """From a stored or scripted dict; keys the record does not have are left out."""
        d = dict(d or {})
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        kw["status"] = str(d.get("status") or Status.HARNESS_ERROR)
        if "diagnosis" in kw:
            kw["diagnosis"] = tuple(kw["diagnosis"])
        spread = kw.get("spread")
        if spread is not None and (not isinstance(spread, (int, float)) or math.isnan(spread)):
            kw.pop("spread")
        return cls(**kw)

    @classmethod
    def of(cls, value: "Result | Mapping[str, Any] | None") -> "Result":
        return value if isinstance(value, Result) else cls.from_dict(value)


NO_RESULT = Result(Status.PENDING)
"""A node's result before its evaluation ends."""
