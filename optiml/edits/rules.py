"""The ``rules`` proposer: offline, profile-guided, safe source transformations (issue 5, item 7).

It generates every transform of :mod:`optiml.edits.transforms` for the node, drops those already
tried from this node, gives each a prior from the node's profile (bank conflicts favour padding,
register-limited occupancy favours ``__launch_bounds__`` and register caps, ...) and returns the
top ``k``. Ties are broken by a shuffle drawn from ``rng`` over a canonical order, so the same seed
gives the same proposals.
"""
from __future__ import annotations

import math

from .transforms import Transform, all_transforms
from .types import NodeView, Proposal

# base priors by transform kind, before the profile adjusts them
BASE = {"tune": 0.5, "pad": 0.3, "restrict": 0.3, "const": 0.25, "unroll": 0.3,
        "launch_bounds": 0.25, "flag": 0.2}


def _num(metrics: dict, key: str) -> float | None:
    v = metrics.get(key)
    v = getattr(v, "value", v)
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _limiters(metrics: dict) -> set[str]:
    v = metrics.get("occupancy_limiters")
    v = getattr(v, "value", v)
    return {s.strip() for s in v.split(",")} if isinstance(v, str) else set()


def conflicts(metrics: dict) -> float:
    """Shared-memory bank conflicts (loads + stores) the profile measured, 0 when unknown."""
    return sum(_num(metrics, k) or 0.0 for k in ("smem_ld_bank_conflicts", "smem_st_bank_conflicts"))


def prior(t: Transform, node: NodeView) -> float | None:
    """The prior of one transform for ``node``; None means: do not propose it at all."""
    m = node.metrics or {}
    regs_limited = "registers" in _limiters(m)
    p = BASE.get(t.kind, 0.2)
    if t.kind == "pad":
        c = conflicts(m)
        if c <= 0:
            return None                       # no conflicts measured: padding cannot help
        # 1e3 conflicts -> ~0.55, 1e6 -> ~0.8, 1e9 -> ~1.05 (before the hint)
        p = 0.3 + 0.25 * math.log10(max(c, 10.0)) / 3.0
        p = max(p, 0.9) if c >= 1e6 else p
    elif t.kind in ("launch_bounds",) and regs_limited:
        p = 0.7
    elif t.kind == "flag" and t.flags and t.flags[0].startswith("-maxrregcount"):
        p = 0.6 if regs_limited else 0.15
        spills = (node.resources or {}).get("spill_stores", 0) or 0
        p *= 0.5 if spills else 1.0
    elif t.kind == "tune":
        occ = _num(m, "achieved_occupancy_pct")
        if occ is not None and occ < 50 and _limiters(m) & {"warps", "blocks"}:
            p = 0.6
    return p * t.hint


class RulesProposer:
    """Catalogue of safe transformations, ranked by the node's diagnosis."""

    def __init__(self, name: str = "rules", threads: int | None = None):
        self.name = name
        self.threads = threads          # threads per block, when the caller knows it (spec launch)

    def candidates(self, node: NodeView) -> list[Proposal]:
        """Every new proposal for ``node`` with its prior, in canonical (edit) order."""
        regs = (node.resources or {}).get("registers")
        tried = {a.edit for a in node.attempts}
        out = []
        for t in all_transforms(node.source, node.entry, tuple(node.flags), regs, self.threads):
            if t.edit in tried:
                continue
            p = prior(t, node)
            if p is None or p <= 0:
                continue
            out.append(Proposal(source=t.source, flags=tuple(node.flags) + t.flags, edit=t.edit,
                                rationale=t.rationale, prior=p, proposer=self.name))
        return sorted(out, key=lambda p: p.edit)

    def propose(self, node: NodeView, k: int, rng) -> list[Proposal]:
        cands = self.candidates(node)
        keys = [rng.random() for _ in cands]           # tie-breaks, reproducible from the seed
        ranked = sorted(zip(cands, keys), key=lambda ck: (-round(ck[0].prior, 9), ck[1]))
        return [c for c, _ in ranked[:max(k, 0)]]
