"""The search tree: nodes (a source with its build flags), source normalisation, stored records.

A node's identity is its source after :func:`normalize_source` together with its flags, so two
proposals that differ only in whitespace or comments are one node and are evaluated once.

A node record (:meth:`Node.record`) holds everything needed to rebuild the tree without evaluating
again: id, parent id, source, flags, edit, rationale, proposer, prior, the index of the proposer call
on the parent that produced it (``call``), status and the evaluation dict (``result``). Proposals
that never became nodes (an edit that did not apply, a duplicate) are stored as attempt records
with ``id`` None and status ``edit_failed`` or ``duplicate``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Protocol

from ..best import DEFAULT_SPREAD
from ..edits.types import Attempt
from ..status import Status
from .result import NO_RESULT, Result

PENDING = Status.PENDING
RUNNING = Status.RUNNING             # submitted, its result not in yet

_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)


def normalize_source(text: str) -> str:
    """``text`` without comments, each line stripped with inner whitespace runs collapsed to one
    space, blank lines dropped. String and character literals are kept as they are."""
    literals: list[str] = []

    def repl(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith("//"):
            return ""
        if s.startswith("/*"):
            return "\n" if "\n" in s else " "
        literals.append(s)
        return f"\0{len(literals) - 1}\0"
    text = _TOKEN.sub(repl, text.replace("\r\n", "\n"))
    lines = (re.sub(r"[ \t\f\v]+", " ", line).strip() for line in text.split("\n"))
    text = "\n".join(line for line in lines if line)
    return re.sub(r"\0(\d+)\0", lambda m: literals[int(m.group(1))], text)


def node_key(source: str, flags) -> tuple[str, tuple[str, ...]]:
    return normalize_source(source), tuple(flags)


@dataclass
class Node:
    id: int
    parent: Node | None
    source: str
    flags: tuple[str, ...] = ()
    edit: str = ""
    rationale: str = ""
    proposer: str = ""
    prior: float = 1.0
    call: int | None = None              # the parent's proposer call that produced it (None: root, seed)
    exchange: dict | None = None         # the proposer call's record (an LLM exchange), not replayed
    status: str = PENDING
    result: Result = NO_RESULT
    reward: float | None = None
    visits: int = 0
    value_sum: float = 0.0
    inflight: int = 0                    # evaluations in flight in this subtree (virtual visits)
    children: list[Node] = field(default_factory=list)
    tried: list = field(default_factory=list)   # children (Node) and failed proposals (Attempt), in order
    calls: int = 0                       # proposer calls made on this node
    fruitless: int = 0                   # trailing calls that produced no new node
    exhausted: bool = False              # the proposer has nothing new for it

    def __repr__(self) -> str:  # the default would print the whole subtree
        return f"Node({self.id}, {self.edit!r}, {self.status}, {self.median_ms}, n={self.visits})"

    @property
    def median_ms(self) -> float | None:
        return self.result.median_ms if self.status == Status.OK else None

    @property
    def unsafe(self) -> bool:
        """compute-sanitizer found an error in it (a root so found stays ``ok``: see MCTS.amend)."""
        return self.status == Status.UNSAFE or (self.result.sanitize or {}).get("status") == "unsafe"

    @property
    def spread(self) -> float:
        s = self.result.spread
        return float(s) if isinstance(s, (int, float)) else DEFAULT_SPREAD

    @property
    def metrics(self) -> dict:
        return dict(self.result.metrics)

    @property
    def diagnosis(self) -> tuple[str, ...]:
        return tuple(self.result.diagnosis)

    @property
    def q(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else 1 + self.parent.depth

    def path(self) -> tuple[str, ...]:
        """The edits from the root to this node."""
        return () if self.parent is None else self.parent.path() + (self.edit,)

    def widening_limit(self, k_w: float, alpha: float) -> int:
        """Progressive widening: at most ceil(k_w * max(visits, 1) ** alpha) children, counting the
        evaluations in flight below it as visits (so a busy node widens)."""
        return max(1, math.ceil(k_w * max(self.visits + self.inflight, 1) ** alpha))

    def attempts(self) -> tuple[Attempt, ...]:
        """What was tried from this node and how each ended, oldest first (for the proposer); a
        child still being evaluated shows as ``running``."""
        out = []
        for t in self.tried:
            if isinstance(t, Attempt):
                out.append(t)
                continue
            speedup = self.median_ms / t.median_ms if self.median_ms and t.median_ms else None
            out.append(Attempt(edit=t.edit, status=t.status, message=str(t.result.message or ""),
                               speedup=speedup))
        return tuple(out)

    def record(self) -> dict:
        return {"id": self.id, "parent": self.parent.id if self.parent else None, "source": self.source,
                "flags": list(self.flags), "edit": self.edit, "rationale": self.rationale,
                "proposer": self.proposer, "prior": self.prior, "call": self.call,
                "status": str(self.status), "result": self.result.to_dict() if self.result is not NO_RESULT else {},
                "reward": self.reward}


def attempt_record(parent: Node, proposal, status: str, message: str, call: int) -> dict:
    """The record of a proposal that did not become a node (edit_failed, duplicate or refused)."""
    return {"id": None, "parent": parent.id, "source": proposal.source, "flags": list(proposal.flags),
            "edit": proposal.edit, "rationale": proposal.rationale, "proposer": proposal.proposer,
            "prior": proposal.prior, "call": call, "status": str(status), "result": {"message": message},
            "exchange": proposal.exchange}


class Observer(Protocol):
    """Told of every change, so a trace store can write before and after each evaluation. With
    evaluations in flight (``SearchConfig.parallel``), several nodes may be started before the
    first of them is evaluated, and they are evaluated in the order their results arrive."""

    def on_node_added(self, node: Node) -> None:
        """A new node, status pending, before its evaluation starts."""

    def on_node_started(self, node: Node) -> None:
        """The node's evaluation is about to start (a store marks it running)."""

    def on_node_evaluated(self, node: Node) -> None:
        """The node's status, result and reward are in."""

    def on_node_withdrawn(self, node: Node) -> None:
        """The node's evaluation was taken back before it started: it is pending again (optional)."""

    def on_node_amended(self, node: Node) -> None:
        """A later result replaced the finished node's (status, result and reward): a background
        stage's verdict, such as a new best found unsafe."""

    def on_attempt(self, parent: Node, record: dict) -> None:
        """A proposal that did not become a node (see :func:`attempt_record`)."""


class RecordingObserver:
    """Keeps the records in memory, in order, in the form :meth:`MCTS.from_records` takes."""

    def __init__(self) -> None:
        self._rows: list[dict] = []
        self._index: dict[int, int] = {}

    def on_node_added(self, node: Node) -> None:
        self._index[node.id] = len(self._rows)
        self._rows.append(node.record())

    def on_node_started(self, node: Node) -> None:
        pass

    def on_node_withdrawn(self, node: Node) -> None:
        pass

    def on_node_evaluated(self, node: Node) -> None:
        self._rows[self._index[node.id]] = node.record()

    def on_node_amended(self, node: Node) -> None:
        self._rows[self._index[node.id]] = node.record()

    def on_attempt(self, parent: Node, record: dict) -> None:
        self._rows.append({k: v for k, v in record.items() if k != "exchange"})   # exchanges are not replayed

    @property
    def records(self) -> list[dict]:
        return [dict(r) for r in self._rows]
