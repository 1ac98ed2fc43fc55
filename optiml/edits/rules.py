"""The ``rules`` proposer: offline, profile-guided, safe source transformations.

It generates every transform of :mod:`optiml.edits.transforms` for the node, drops those already
tried from this node, gives each a prior from the node's profile (bank conflicts favour padding,
register-limited occupancy favours ``__launch_bounds__`` and register caps, ...) and returns the
top ``k``. Ties are broken by a shuffle drawn from ``rng`` over a canonical order, so the same seed
gives the same proposals.
"""
from __future__ import annotations

import math
import re

from ..status import Category, category
from .space import SpaceMoves, priors
from .templates import template_space
from .transforms import Transform, all_transforms
from .types import Attempt, NodeView, Proposal

# base priors by transform kind, before the profile adjusts them
BASE = {"template": 0.9, "tune": 0.5, "knob": 0.6, "coarsen": 0.4, "vectorize": 0.4, "accumulate": 0.7, "cache": 0.5, "shuffle": 0.35,
        "partials": 0.7, "space": 0.5, "pad": 0.3, "restrict": 0.3, "const": 0.25, "unroll": 0.3, "launch_bounds": 0.25, "flag": 0.2}


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


FAILED_FAMILY = 0.4         # the prior's factor for each failure of the same edit family seen on the path
GIVE_UP = 3                 # failures of one family on the path after which it is not proposed there again
NO_GAIN = 1.02              # a flag tried above this node that gained less than this is not tried again below
# edits whose worth hardly depends on the rest of the kernel: tried above with no gain, not tried below
_CONTEXT_FREE = {"flag", "restrict", "const", "unroll"}
_TUNE_EDIT = re.compile(r"^(\w+) -?\d+ -> -?\d+$")
_RUNTIME_FAILURES = {Category.WRONG, Category.CRASH}


def family(edit: str) -> str:
    """The family of an edit: the transform kind and its parameter (``BLOCK 128 -> 256`` and
    ``BLOCK 64 -> 32`` are one family, ``tune BLOCK``; a flag is its own family, its value aside)."""
    m = _TUNE_EDIT.match(edit.strip())
    if m:
        return f"tune {m.group(1)}"
    words = edit.split()
    if words[:1] == ["flag"] and len(words) > 1:
        return "flag " + words[1].split("=")[0]
    return " ".join(words[:2])


REGISTERS_PER_SM = 65536       # 64 K 32-bit registers an SM (and a block) since sm_50
_FAILED_BLOCK = re.compile(r"a block of (\d+) threads needs")


def _launch_facts(source: str, entry: str, spec_threads: int | None) -> tuple[bool, int | None]:
    """(whether the entry has ``__launch_bounds__``, its threads a block when the source or the
    spec's literal launch shows them)."""
    from ..expr import evaluate
    from ..source import parse_source
    from .cutree import _entry_def, _tree
    from .transforms import block_dims

    fn, _ = _entry_def(_tree(source), entry)
    if fn is not None and any(c.type == "launch_bounds" for c in fn.children):
        return True, None
    dims = block_dims(source, entry)
    if dims is None:
        return False, spec_threads if "optiml:launch" not in source else None
    try:
        env = {k: v for k, v in parse_source(source).constants.items()}
        n = 1
        for d in dims:
            n *= int(evaluate(str(d), env))
        return False, n
    except Exception:
        return False, None


def _seen(node: NodeView) -> list[Attempt]:
    return list(node.inherited) + list(node.attempts)


def _memory_bound(m: dict) -> bool:
    mem, sm = _num(m, "memory_throughput_pct"), _num(m, "sm_throughput_pct")
    return mem is not None and sm is not None and mem >= 60 and sm < 40


def prior(t: Transform, node: NodeView) -> float | None:
    """The prior of one transform for ``node``; None means: do not propose it at all.

    Learning from the path: each time an edit of the same family (:func:`family`) failed
    verification, faulted or timed out from this node or an ancestor, the prior is multiplied by
    :data:`FAILED_FAMILY`, and after :data:`GIVE_UP` such failures it is not proposed there at all;
    an edit (other than a constant's value) that failed to compile from an ancestor is not proposed
    again below it; a flag (or the same ``__restrict__``, ``const`` or unroll pragma:
    :data:`_CONTEXT_FREE`; launch bounds, unless registers limit the node's occupancy) already tried
    above this node that gained less than :data:`NO_GAIN` is not proposed again below it;
    ``-use_fast_math`` is worth less on a memory-bound profile."""
    p = _prior(t, node)
    if p is None:
        return None
    fam = family(t.edit)
    seen = [a for a in _seen(node) if family(a.edit) == fam]
    # a flag by its family (its value aside); the others by their exact edit (another loop's pragma is not it);
    # launch bounds too, unless registers limit this node's occupancy (tuning changed what they are worth)
    context_free = t.kind in _CONTEXT_FREE or (t.kind == "launch_bounds" and
                                               "registers" not in _limiters(node.metrics or {}))
    if context_free and any(a in node.inherited and category(a.status) is Category.OK and
                            (a.speedup or 0.0) < NO_GAIN and (t.kind == "flag" or a.edit == t.edit) for a in seen):
        return None
    fails = sum(1 for a in seen if category(a.status) in _RUNTIME_FAILURES)
    if fails >= GIVE_UP:
        return None
    if t.kind not in ("tune", "knob") and any(a.edit == t.edit and a.status == "compile_error" for a in node.inherited):
        return None          # the same edit failed to compile above: below, the same text fails the same way
                             # (a constant's new value may compile once other constants changed: not those)
    p *= FAILED_FAMILY ** fails
    if t.edit == "flag -use_fast_math" and _memory_bound(node.metrics or {}):
        p *= 0.3
    return p


def _prior(t: Transform, node: NodeView) -> float | None:
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


def profile_reason(kind: str, m: dict) -> tuple[float, str]:
    """How the node's profile weighs a structural rewrite (a factor on its prior) and the sentence
    saying why, stored with the proposal; (1.0, "") when the profile says nothing about it."""
    dram, barrier = _num(m, "dram_throughput_pct"), _num(m, "stall_barrier")
    occ = _num(m, "achieved_occupancy_pct")
    if kind in ("accumulate", "shuffle", "partials"):
        if barrier is not None and barrier >= 0.5:
            return 1.3, f"The profile shows {barrier:.2f} warps per issue cycle stalled at barriers: the reduction's steps cost."
        if dram is not None and dram < 50:
            return 1.2, f"The profile shows DRAM at {dram:.0f} % of its peak: the loads do not stream."
    elif kind == "cache":
        if dram is not None and dram >= 60:
            return 1.4, f"The profile shows DRAM at {dram:.0f} % of its peak: reading each element once saves traffic."
    elif kind in ("vectorize", "coarsen"):
        if dram is not None and dram < 70:
            return 1.2, f"The profile shows DRAM at {dram:.0f} % of its peak: fewer, wider memory instructions help it stream."
    elif kind == "knob":
        if occ is not None and occ < 50 and _limiters(m) & {"warps", "blocks"}:
            return 1.3, f"The profile shows {occ:.0f} % achieved occupancy, limited by warps or blocks per SM."
    return 1.0, ""


class RulesProposer:
    """Catalogue of safe transformations, ranked by the node's diagnosis.

    With a declared tuning space (``space``, the spec's ``[tune]``; ``size_sets`` for its
    restrictions) its names move only within their lists, ranked by what the whole search has
    measured (:mod:`optiml.edits.space`), and no other integer constant is tuned; the other
    transforms stay (``space_only`` leaves them out, as a replay of a recorded space needs)."""

    def __init__(self, name: str = "rules", threads: int | None = None, space=None, size_sets=(),
                 space_only: bool = False, launch=None, templates=None):
        self.name = name
        self.threads = threads          # threads per block, when the caller knows it (spec launch)
        self.launch = launch            # the spec's (grid, block, shared_mem): a literal block becomes a knob
        self.space, self.size_sets, self.space_only = space, tuple(size_sets), space_only
        # (seed source, template transforms, why none): offered (or the refusal said) at the seed only
        self.templates = templates
        self._moves: dict[str, SpaceMoves] = {}

    def candidates(self, node: NodeView) -> list[Proposal]:
        """Every new proposal for ``node`` with its prior, in canonical (edit) order (the declared
        space's moves aside: :meth:`space_moves`)."""
        if self.space and self.space_only:
            return []
        regs = (node.resources or {}).get("registers")
        tried = {a.edit for a in node.attempts}
        out, refused = [], []
        # a declared space, or an instantiated template's own, is searched by its moves instead of
        # one constant at a time (most single steps of a template's constants break its restrictions)
        made = all_transforms(node.source, node.entry, tuple(node.flags), regs, self.threads,
                              auto_tune=self._space_of(node) is None, launch=self.launch, refused=refused)
        if self.templates and node.source == self.templates[0]:     # the operation templates: at the seed
            made += self.templates[1]
            if self.templates[2] and not self.templates[1]:
                refused.append(("template", self.templates[2]))
        for t in made:
            if t.edit in tried or self._cannot_launch(t, node, regs):
                continue
            p = prior(t, node)
            if p is None or p <= 0:
                continue
            factor, why = profile_reason(t.kind, node.metrics or {})
            out.append(Proposal(source=t.source, flags=tuple(node.flags) + t.flags, edit=t.edit,
                                rationale=f"{t.rationale} {why}".strip(), prior=p * factor, proposer=self.name))
        # a rewrite that looked applicable and was not made: recorded once where it first happened
        said = {(a.edit, a.message) for a in _seen(node)}
        for name, why in refused:
            edit = f"{name}: refused"
            if (edit, why) not in said and edit not in tried:
                out.append(Proposal(source=node.source, flags=tuple(node.flags), edit=edit, rationale=why,
                                    prior=0.0, proposer=self.name, refused=why))
        return sorted(out, key=lambda p: p.edit)

    def _cannot_launch(self, t: Transform, node: NodeView, regs: int | None) -> bool:
        """``t``'s kernel would ask a block for more registers than an SM has (a launch_config_error
        that costs a candidate and says nothing): without ``__launch_bounds__`` (which makes ptxas fit
        the registers to the block), its block times the node's registers is past
        :data:`REGISTERS_PER_SM`; or the same edit failed so from an ancestor, and this node's block is
        not known to be smaller than the block it failed with."""
        spec_threads = self.threads
        if spec_threads is None and self.launch is not None and all(isinstance(b, int) for b in self.launch[1]):
            spec_threads = math.prod(self.launch[1])
        bounded, threads = _launch_facts(t.source, node.entry, spec_threads)
        if bounded:
            return False
        if regs and threads and regs * threads > REGISTERS_PER_SM:
            return True
        for a in node.inherited:
            if a.edit == t.edit and a.status == "launch_config_error":
                m = _FAILED_BLOCK.search(a.message or "")
                if threads is None or m is None or threads >= int(m.group(1)):
                    return True
        return False

    def _space_of(self, node: NodeView) -> SpaceMoves | None:
        """The moves of the declared space, else of the template ``node`` was instantiated from."""
        space = self.space or template_space(node.source, node.entry)
        if not space:
            return None
        key = (node.entry, space)
        if key not in self._moves:
            self._moves[key] = SpaceMoves(space, node.entry, self.size_sets if space is self.space else ())
        return self._moves[key]

    def space_moves(self, node: NodeView) -> list[tuple[dict, str, float]]:
        """(changes, edit, prior) of the tuning space's moves from ``node`` (declared in the spec, or
        its template's), in canonical order."""
        moves = self._space_of(node)
        if moves is None:
            return []
        tried = {a.edit for a in node.attempts}
        found = [m for m in moves.moves(node) if m[1] not in tried]
        ps = priors([score for _, _, score in found])
        return sorted(((ch, edit, BASE["space"] * p) for (ch, edit, _), p in zip(found, ps)), key=lambda m: m[1])

    def propose(self, node: NodeView, k: int, rng) -> list[Proposal]:
        made = self.candidates(node)
        refused = [c for c in made if c.refused]
        cands: list = [c for c in made if not c.refused] + self.space_moves(node)
        moves = self._space_of(node)            # the space the moves above come from (once, not per move)
        where = "declared tuning space" if self.space else "template's space"
        keys = [rng.random() for _ in cands]           # tie-breaks, reproducible from the seed
        prior_of = lambda c: c.prior if isinstance(c, Proposal) else c[2]
        ranked = sorted(zip(cands, keys), key=lambda ck: (-round(prior_of(ck[0]), 9), ck[1]))
        out = []
        for c, _ in ranked[:max(k, 0)]:
            if not isinstance(c, Proposal):
                changes, edit, p = c
                c = Proposal(source=moves.source(node, changes), flags=tuple(node.flags),
                             edit=edit, prior=p, proposer=self.name,
                             rationale=f"a move in the {where}, "
                                       "ranked by a model of every runtime the search has measured (near the fast ones, "
                                       "or far from anything measured).")
            out.append(c)
        return out + refused            # records, outside the k (the search stores them as refused)
