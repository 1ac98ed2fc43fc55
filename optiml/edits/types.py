"""What a proposer sees and what it returns: the contract between the search and the proposers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Attempt:
    """A child already tried from a node, and how it ended (so a proposer does not repeat it)."""
    edit: str
    status: str                  # an Evaluation status (ok, compile_error, wrong_output, ...) or edit_failed
    message: str = ""
    speedup: float | None = None  # over the node, when it verified


@dataclass(frozen=True)
class Measured:
    """A candidate anywhere in the tree (pending, running or finished), so a proposer can learn
    from the whole search: its source, flags, status and median (None unless it verified)."""
    source: str
    flags: tuple[str, ...]
    status: str
    median_ms: float | None = None


@dataclass(frozen=True)
class NodeView:
    """One node of the tree as a proposer sees it."""
    source: str
    flags: tuple[str, ...] = ()
    entry: str = ""
    metrics: dict = field(default_factory=dict)       # profiler plain keys (optiml.profiler.metrics)
    diagnosis: tuple[str, ...] = ()
    median_ms: float | None = None
    resources: dict = field(default_factory=dict)     # ptxas: registers, smem_static, spills...
    attempts: tuple[Attempt, ...] = ()
    task: str = ""                                    # a description of the task (spec summary)
    inherited: tuple[Attempt, ...] = ()               # what was tried from its ancestors (root first)
    measured: tuple[Measured, ...] = ()               # every node of the tree, in creation order


@dataclass(frozen=True)
class Proposal:
    """A candidate: the whole new source (and extra nvcc flags), with why."""
    source: str
    flags: tuple[str, ...]
    edit: str                    # short, stable description, e.g. "BLOCK 16 -> 32"
    rationale: str
    prior: float = 1.0           # relative preference from the diagnosis, > 0
    proposer: str = "rules"
    error: str | None = None     # an edit that could not be applied: stored as edit_failed
    refused: str | None = None   # a rewrite that was looked at and not made, and why: stored as refused,
                                 # outside the ``k`` proposals asked for
    exchange: dict | None = None  # the proposer call behind it (LLM: model, prompt, raw answer,
                                  # parsed_edits, tokens_in, tokens_out, latency_s, error), stored
                                  # once in the proposals table even when proposals share it


def new_implementation(edit: str, proposer: str) -> bool:
    """Whether a proposal replaces the operation's implementation rather than changing its parent
    (an operation template, a kernel given with ``--seed-kernel``): its time owes little to its
    parent's, so the search's focus never holds it back behind a slow parent. Read from the stored
    edit and proposer, so a resumed search decides the same."""
    return proposer == "seed" or edit.startswith("template ")


class Proposer(Protocol):
    name: str

    def propose(self, node: NodeView, k: int, rng) -> list[Proposal]:
        """Up to ``k`` new proposals for ``node`` (fewer, or none, when it has nothing new)."""
        ...
