"""compute-sanitizer's text output, parsed (parent side, no GPU): how many errors each tool saw
and the first one in words (tool, kind, kernel, source line, thread and block, the address detail).

Real output of compute-sanitizer 2025.3.1 for each tool is in tests/data/sanitizer/."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

_PREFIX = re.compile(r"^========= ?")
_AT = re.compile(r"^\s*at (?P<kernel>[^\s+]+)(?:\+0x[0-9a-f]+)?(?: in (?P<where>\S+))?")
_BY = re.compile(r"^\s*by thread \((?P<thread>[\d,]+)\) in block \((?P<block>[\d,]+)\)")
_RACE = re.compile(r"^(?:Error|Warning): Race reported between (?P<first>\w+) access at (?P<kernel>[^\s+]+)"
                   r"(?:\+0x[0-9a-f]+)?(?: in (?P<where>\S+))?")
_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<n>[\d,]+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (?P<shown>\d+) hazards? displayed \((?P<n>\d+) errors?, (?P<w>\d+) warnings?\)")
_NOISE = ("Saved host backtrace", "Host Frame:", "Device Frame:", "Target application returned an error",
          "Program hit ", "ERROR SUMMARY", "RACECHECK SUMMARY", "COMPUTE-SANITIZER")


@dataclass(frozen=True)
class Finding:
    """One error a tool reported, as it reported it."""
    tool: str
    kind: str                        # "Invalid __global__ write of size 4 bytes", "Race reported between ..."
    kernel: str = ""
    where: str = ""                  # file:line with -lineinfo
    thread: str = ""
    block: str = ""
    detail: str = ""                 # the address lines ("... is 1 bytes after the nearest allocation ...")

    def sentence(self) -> str:
        at = f" in {self.kernel}" + (f" at {self.where}" if self.where else "") if self.kernel else ""
        who = f", thread ({self.thread}) of block ({self.block})" if self.thread else ""
        more = f": {self.detail}" if self.detail else ""
        return f"{self.tool}: {self.kind}{at}{who}{more}"


@dataclass(frozen=True)
class ToolReport:
    tool: str
    errors: int                                   # as the tool's summary counts them
    findings: tuple[Finding, ...] = field(default_factory=tuple)   # the ones it printed
    complete: bool = True                         # the summary line was there (the tool ran to its end)

    @property
    def clean(self) -> bool:
        return self.complete and self.errors == 0


def parse(text: str, tool: str) -> ToolReport:
    """One tool's run: its error count and the findings it printed, in order."""
    lines = [_PREFIX.sub("", ln) for ln in text.splitlines() if ln.startswith("=========")]
    findings: list[dict] = []
    errors, complete = None, False
    for raw in lines:
        line = raw.strip()
        if m := _RACE_SUMMARY.search(line):
            errors, complete = int(m.group("n")), True
            continue
        if m := _SUMMARY.search(line):
            if errors is None:
                errors = int(m.group("n").replace(",", ""))
            complete = True
            continue
        if not line or any(line.startswith(n) or n in line for n in _NOISE):
            continue
        indented = raw.startswith(" ")
        if not indented:
            if m := _RACE.match(line):
                findings.append({"kind": line.split(" at ")[0].removeprefix("Error: ").removeprefix("Warning: "),
                                 "kernel": m.group("kernel"), "where": m.group("where") or ""})
                continue
            findings.append({"kind": line.rstrip(".")})
            continue
        if not findings:
            continue
        f = findings[-1]
        if (m := _AT.match(line)) and "kernel" not in f:
            f.update(kernel=m.group("kernel"), where=m.group("where") or "")
        elif m := _BY.match(line):
            f.update(thread=m.group("thread"), block=m.group("block"))
        elif line.startswith("and ") and f.get("kind", "").startswith("Race reported"):
            f["kind"] += " and " + line.removeprefix("and ").split(" at ")[0]
            if hz := re.search(r"\[(\d+) hazards?\]", line):
                f["detail"] = f"{hz.group(1)} hazards"
        elif line.startswith(("Access to", "and is", "Address")):
            f["detail"] = (f.get("detail", "") + " " + line).strip()
    found = tuple(Finding(tool=tool, **f) for f in findings)
    if errors is None:
        errors = len(found)
    return ToolReport(tool, errors, found, complete)
