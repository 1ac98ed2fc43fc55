"""Candidate hygiene: what a proposed source may not do before it is ever built.

A proposal comes from a model and is untrusted. nvcc echoes the lines of any file a source
includes into its error log, and that log is stored and shown to the model, so an edit may not
add an ``#include`` the seed kernel does not have, other than a system header in angle brackets
(``<cuda_fp16.h>``, ``<cstdint>``); an absolute path, ``..`` or a device file is refused even
there. A refused proposal is an ``edit_failed`` attempt with one sentence, never built.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from .types import NodeView, Proposal, Proposer

_HEADER = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*(\.(h|hh|hpp|hxx|cuh|inl|tcc))?")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*(include|include_next|import|embed)\b[ \t]*(.*?)[ \t]*(?://.*|/\*.*)?$", re.M)


def includes(source: str) -> list[str]:
    """The operand of every include-like directive, as written (``<cstdint>``, ``"tile.h"``, ``MACRO``)."""
    return [m.group(2) for m in _INCLUDE.finditer(source.replace("\\\n", ""))]


def include_violation(seed_source: str, source: str, include_dirs=()) -> str | None:
    """Why ``source`` may not be built (one sentence), or None. ``include_dirs``: the folders nvcc
    searches with -I (the kernel's own), where an angle-bracket name would find a user file."""
    allowed = set(includes(seed_source))
    for target in includes(source):
        if target in allowed:
            continue
        name = target[1:-1] if len(target) >= 2 and target[0] + target[-1] in ("<>", '""') else None
        if name is None or target.startswith('"'):
            return (f"the edit adds #include {target}, which the seed kernel does not have; a candidate may add "
                    f"only system headers in angle brackets.")
        if name.startswith("/") or ".." in name.split("/") or name.startswith("~") or "\\" in name:
            return f"the edit adds #include {target}: absolute paths, .. and device files are not allowed."
        if not _HEADER.fullmatch(name) or any((Path(d) / name).exists() for d in include_dirs):
            return (f"the edit adds #include {target}, which is not a system header; a candidate may add only "
                    f"CUDA and C++ system headers.")
    return None


class IncludeGuard:
    """A proposer whose proposals that break :func:`include_violation` come back as failed edits."""

    def __init__(self, proposer: Proposer, seed_source: str, include_dirs=()):
        self.proposer, self.seed_source, self.include_dirs = proposer, seed_source, tuple(include_dirs)
        self.name = proposer.name

    def propose(self, node: NodeView, k: int, rng) -> list[Proposal]:
        out = []
        for p in self.proposer.propose(node, k, rng):
            why = None if p.error else include_violation(self.seed_source, p.source, self.include_dirs)
            out.append(replace(p, error=why) if why else p)
        return out
