"""The messages the ``llm`` proposer sends for one node: what the kernel is, how it performs, what
was tried from it, the rules an edit must keep and the answer format :mod:`.blocks` reads."""
from __future__ import annotations

from collections.abc import Iterable

from .types import Attempt, NodeView

# the profile keys shown to the model, in this order (optiml.profiler.metrics plain keys)
METRIC_KEYS = (
    "duration_ns", "achieved_occupancy_pct", "theoretical_occupancy_pct", "occupancy_limiters",
    "registers_per_thread", "static_smem_per_block", "dynamic_smem_per_block",
    "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l2_throughput_pct",
    "l1_throughput_pct", "l2_hit_rate_pct", "smem_ld_bank_conflicts", "smem_st_bank_conflicts",
    "smem_ld_conflict_ratio", "smem_st_conflict_ratio", "local_load_bytes", "local_store_bytes",
    "tensor_pipe_active_pct", "top_stall_reasons",
)
RESOURCE_KEYS = ("registers", "smem_static", "spill_stores", "spill_loads", "stack_frame", "barriers")
MESSAGE_CHARS = 300          # of one attempt's message (compile logs can be long)
TRANSPORT_PREFIX = "llm request failed"

SYSTEM = """\
You are an expert CUDA performance engineer. You make one CUDA kernel faster by small, \
verifiable source edits. Every edit you propose is compiled with nvcc, checked against a \
reference on several input sizes, timed on the GPU and profiled; the fastest correct variants \
are kept and edited further.

Rules:
- Keep the entry kernel's name and parameter list (names, types, order) exactly as they are: \
the harness calls it by name with the same arguments. Helper functions and kernels may change.
- The outputs must stay correct within the task's tolerance for every size, partial tiles \
included, and every output element must be written. For float32 the tolerance allows a \
different summation order, not TF32 or half-precision arithmetic.
- Change only the source; the nvcc flags stay as they are.
- Launch geometry: the harness launches the kernel with the task's grid and block, which may be \
expressions over the problem sizes and over the source's #define / constexpr integer constants \
(so changing such a constant changes the launch with it). If your edit changes how work maps to \
threads, state the new launch in one comment line of the source, a TOML inline table:
    // optiml:launch {grid = ["cdiv(N, 64)", "cdiv(M, 64)"], block = [256], shared_mem = 0}
  grid and block hold 1 to 3 dimensions, each a number or a quoted expression over the sizes \
and constants (+ - * / // % min max cdiv round_up ...; / between integers truncates as in C); \
shared_mem is the dynamic shared memory per block in bytes (a number or a quoted expression). \
A key you leave out keeps the task's value. A source carries at most one such line: if it \
already has one, edit that line instead of adding another.
- Propose exactly ONE edit (one idea; it may touch several places). Do not repeat an edit that \
was already tried, and learn from the ones that failed.

Answer format, and nothing else:
EDIT: <a short title of the edit, under 80 characters>
WHY: <one or two sentences: what limits the kernel now and why the edit helps>
<<<<<<< SEARCH
<lines copied exactly from the current source>
=======
<the lines that replace them>
>>>>>>> REPLACE

Use one or more SEARCH/REPLACE blocks; they apply in order. Each SEARCH part must be copied \
character for character from the current source, indentation included, and must match exactly \
one place: include enough surrounding lines to make it unique. Keep blocks small; do not \
repeat the whole file."""


def value(v) -> object:
    """A metric's value: plain numbers and text as they are, objects by their ``.value``."""
    return getattr(v, "value", v)


def fmt(v) -> str:
    v = value(v)
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) < 1e12 else f"{v:.3e}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return " ".join(str(v).split())


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _attempt(i: int, a: Attempt) -> str:
    line = f"{i}. \"{a.edit}\" -> {a.status}"
    if a.status == "ok" and a.speedup:
        line += f", {a.speedup:.2f}x " + ("faster" if a.speedup >= 1 else "(slower)")
    elif a.status == "duplicate":
        line += " (it produced a source that was already evaluated)"
    if a.message and a.status != "duplicate":
        line += f": {_short(a.message)}"
    return line


def history(attempts: Iterable[Attempt]) -> list[str]:
    """The attempts section: one line per attempt, and a warning after SEARCH blocks that missed.
    Requests that failed in transport say nothing about an edit and are left out."""
    shown = [a for a in attempts if not (a.message or "").startswith(TRANSPORT_PREFIX)]
    if not shown:
        return []
    out = ["## Already tried from this kernel (do not repeat these)"]
    out += [_attempt(i, a) for i, a in enumerate(shown, start=1)]
    missed = [i for i, a in enumerate(shown, start=1) if a.status == "edit_failed"
              and ("matches nothing" in a.message or "places in the source" in a.message)]
    if missed:
        nums = ", ".join(str(i) for i in missed)
        out.append(f"Attention: the SEARCH text of attempt {nums} did not match the current source "
                   "exactly once, so that edit was never compiled. Copy SEARCH lines character for "
                   "character from the source above (same indentation, same comments) and include "
                   "enough lines to match a single place.")
    return out


def profile(view: NodeView) -> list[str]:
    out = []
    if view.median_ms is not None:
        out.append(f"Median runtime: {view.median_ms:.4g} ms")
    res = view.resources or {}
    parts = [f"{k} {fmt(res[k])}" for k in RESOURCE_KEYS if res.get(k) is not None]
    if parts:
        out.append("ptxas: " + ", ".join(parts))
    metrics = view.metrics or {}
    shown = [(k, metrics[k]) for k in METRIC_KEYS if k in metrics and value(metrics[k]) is not None]
    if shown:
        out.append("Profile (ncu):")
        out += [f"- {k}: {fmt(v)}" for k, v in shown]
    if view.diagnosis:
        out.append("Diagnosis:")
        out += [f"- {d}" for d in view.diagnosis]
    return ["## Performance", *out] if out else []


def user_message(view: NodeView, proposed: Iterable[str] = ()) -> str:
    """The request for one edit of ``view``; ``proposed``: titles already asked for in this round."""
    parts = ["## Task", view.task or "(no description)"]
    if view.entry:
        parts.append(f"Entry kernel: `{view.entry}` (keep its name and parameter list).")
    if view.flags:
        parts.append("nvcc flags (unchanged): " + " ".join(view.flags))
    parts += ["", "## Current source", "```cuda", view.source.rstrip("\n"), "```", ""]
    perf = profile(view)
    parts += perf + ([""] if perf else [])
    tried = history(view.attempts)
    parts += tried + ([""] if tried else [])
    proposed = [p for p in proposed if p]
    if proposed:
        parts.append("## Proposed in this round, not yet evaluated (propose something different)")
        parts += [f"- {p}" for p in proposed] + [""]
    parts.append("Propose ONE edit that makes this kernel faster, in the answer format "
                 "(EDIT:, WHY:, then SEARCH/REPLACE blocks).")
    return "\n".join(parts)


def build_messages(view: NodeView, proposed: Iterable[str] = ()) -> list[dict]:
    """The chat messages (system + user) for one request."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": user_message(view, proposed)}]
