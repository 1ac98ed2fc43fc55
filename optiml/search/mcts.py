"""Monte Carlo tree search over proposed source edits.

One step: from the root, descend by PUCT (``Q + c * P * sqrt(N_parent) / (1 + n)``, P the child's
prior normalised over its live siblings) until a node may take another child under progressive
widening (at most ``ceil(k_w * visits ** alpha)`` children, or any number once all of them are dead
ends); ask the proposer for that many new candidates; add the new ones as pending nodes (the
observer writes them before their evaluation); evaluate them in order through the
:class:`Evaluator`; back the reward (:mod:`optiml.search.reward`) up to the root.

Everything the algorithm decides is derived from the stored records, so a run rebuilt with
:meth:`MCTS.from_records` continues exactly as the uninterrupted run would have, with deterministic
proposers: visits and values are recomputed by replaying backpropagation in node-id order (nodes
are evaluated in the order they are created), the proposer's random generator is seeded from
``(seed, node id, index of the proposer call on that node)``, and the calls already made on a node
(and which of them produced nothing new) are read from the ``call`` field of its children's and
failed attempts' records. Pending nodes in the records are evaluated first (as the focus allows).

The budget counts evaluated candidates (the root, which is the reference, is not one); proposals
that do not apply or duplicate a node already in the tree are recorded as attempts but cost nothing.

Evaluations in flight. With ``SearchConfig.parallel`` > 1 and an :class:`AsyncEvaluator` (one with
``submit``), :meth:`MCTS.run` keeps up to ``parallel`` candidates in flight: after the root (alone:
every reward needs its time) it submits pending nodes oldest first and, when none are left, selects
and expands to make more, while the candidates evaluated plus those in flight stay below the budget;
then it waits and takes the results in the order they come. An in-flight node (status ``running``)
is never descended into, and selection goes only into subtrees where something can be done now,
so when everything worth expanding waits on a result the search waits too, and ends as exhausted
only when nothing is in flight. Each node counts the evaluations in flight below it
(``Node.inflight``) as visits in the PUCT exploration term and in progressive widening, but not in
Q: a busy branch looks explored, not worse (the "unobserved samples" of WU-UCT, Liu et al. 2020).
On the test landscapes this kept quality closest to the sequential search; a classic virtual loss
(virtual visits worth 0 or less) sent the search to worse branches and needed more evaluations to
find the same best. Results arrive out of creation order; the sums backpropagation keeps do not
depend on it, so :meth:`MCTS.from_records` rebuilds the same statistics (unfinished nodes are
submitted first, together), but where a parallel search goes next depends on the order results
arrive, so it repeats itself only as far as that order does. With ``parallel`` == 1 or an
evaluator without ``submit``, candidates are evaluated one at a time, as above.

The focus. Once some verified node is more than ``SearchConfig.focus`` (3) times slower than the
fastest, such slow nodes take no new child, and their pending children wait behind the others
(except new implementations, templates and seed kernels, whose time owes little to the parent's),
while a node within the focus can take one or waits on an evaluation in flight below it; when
nothing within the focus is left, the slow nodes get their turn, so the budget is still used. After
a big win (a template 50 times faster than the seed), this keeps the evaluations in flight on the
template's neighbourhood instead of the seed's own lineage, where with several in flight they went
half the time. It is decided from recorded results only, so a resumed run decides the same; a slow
node's child still waiting when the budget runs out stays pending. Evaluations already in flight
when the win arrives are withdrawn where the evaluator can take them back before they reach a GPU
(:class:`Withdraws`): a slow node's children go back to pending (the observer is told,
``on_node_withdrawn``) and wait like the others, and the near work takes their places.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Protocol, runtime_checkable

from loguru import logger

from ..best import Ranked, choose_best
from ..edits.types import Attempt, Measured, NodeView, Proposal, Proposer, new_implementation
from ..status import UNSCORED, Status
from .result import Result
from .reward import reward
from .tree import PENDING, RUNNING, Node, Observer, attempt_record, node_key

_UNFINISHED = (PENDING, RUNNING)


class Evaluator(Protocol):
    def evaluate(self, source: str, flags: tuple[str, ...]) -> Result:
        """The candidate's :class:`Result` (a dict with its fields is taken too)."""
        ...


@runtime_checkable
class AsyncEvaluator(Protocol):
    """An evaluator that takes several candidates at once. The search uses it when
    ``SearchConfig.parallel`` > 1 and the evaluator has a ``submit`` method; otherwise it calls
    :meth:`Evaluator.evaluate` one candidate at a time."""

    def submit(self, token: int, source: str, flags: tuple[str, ...]) -> None:
        """Start evaluating a candidate; ``token`` (the search node id) comes back with its result."""
        ...

    def wait(self) -> list[tuple[int, Result]]:
        """Block until at least one submitted evaluation is done; return every finished (token, Result).
        It may also return a later Result for a token already returned (a stage that runs after the
        result is given out, such as the sanitizer of a new best): it replaces that node's result
        (:meth:`MCTS.amend`)."""
        ...


@runtime_checkable
class Settles(Protocol):
    """An evaluator whose results may be amended later (see :meth:`AsyncEvaluator.wait`)."""

    def settle(self, keep: set[int] | None = None) -> list[tuple[int, Result]]:
        """Wait for every later Result still to come and return them (token, Result); with
        ``keep``, only those of these tokens are wanted (the others may come back unchanged)."""
        ...


@runtime_checkable
class Withdraws(Protocol):
    """An :class:`AsyncEvaluator` that can take back a submitted candidate not yet started."""

    def withdraw(self, token: int) -> bool:
        """True when candidate ``token`` is taken back (its result will not come from ``wait``);
        False when it is too late (it is running or done)."""
        ...


def is_async(evaluator) -> bool:
    """Whether ``evaluator`` implements :class:`AsyncEvaluator` (``submit`` and ``wait``)."""
    return isinstance(evaluator, AsyncEvaluator)


@dataclass(frozen=True)
class SearchConfig:
    budget: int = 200                 # evaluated candidates in all, counting those of a resumed run
    time_limit_s: float | None = None
    seed: int = 0
    c_puct: float = 1.0
    k_w: float = 2.0                  # progressive widening: ceil(k_w * visits ** alpha) children
    alpha: float = 0.5
    max_fruitless: int = 2            # proposer calls in a row with nothing new before a node is exhausted
    parallel: int = 1                 # evaluations in flight at once (with an AsyncEvaluator)
    focus: float = 3.0                # a node over focus x the fastest time takes no new child, and its
                                      # pending children wait, while nodes within it have work (0: off)


class MCTS:
    def __init__(self, root_source: str, evaluator: Evaluator, proposer: Proposer, *,
                 flags: Iterable[str] = (), seed_sources: Iterable[str] = (),
                 config: SearchConfig = SearchConfig(), observer: Observer | None = None,
                 task: str = "", entry: str = "", clock: Callable[[], float] = time.monotonic):
        self._setup(evaluator, proposer, config, observer, task, entry, clock)
        self.root = self._add(None, Proposal(source=root_source, flags=tuple(flags), edit="root",
                                             rationale="the user's kernel", proposer="user"), call=None)
        for i, src in enumerate(seed_sources):
            p = Proposal(source=src, flags=tuple(flags), edit=f"seed kernel {i + 1}",
                         rationale="a kernel given with --seed-kernel", proposer="seed")
            self._take(self.root, p, call=None)

    def _setup(self, evaluator, proposer, config, observer, task, entry, clock) -> None:
        self.evaluator, self.proposer, self.config = evaluator, proposer, config
        self.observer, self.task, self.entry, self.clock = observer, task, entry, clock
        self.nodes: list[Node] = []
        self._keys: dict[tuple, Node] = {}
        self._pending: list[Node] = []
        self.evaluations = 0
        self.stopped: str | None = None      # why the last run ended: "budget", "time_limit" or "exhausted"
        self._cut: float | None = None       # the focus: nodes slower than this many ms wait (None: none wait)

    # -- resume -------------------------------------------------------------------------------

    @classmethod
    def from_records(cls, records: Iterable[dict], evaluator: Evaluator, proposer: Proposer, *,
                     config: SearchConfig = SearchConfig(), observer: Observer | None = None,
                     task: str = "", entry: str = "",
                     clock: Callable[[], float] = time.monotonic) -> MCTS:
        """Rebuild a search from its records (in the order they were written) without evaluating
        them again; unfinished (pending/running) nodes are evaluated first when it runs."""
        self = cls.__new__(cls)
        self._setup(evaluator, proposer, config, None, task, entry, clock)
        by_id: dict = {}
        produced: dict[int, dict[int, bool]] = {}      # node id -> call index -> produced a node
        for rec in records:
            parent = by_id[rec["parent"]] if rec.get("parent") is not None else None
            call = rec.get("call")
            if parent is not None and call is not None:
                calls = produced.setdefault(parent.id, {})
                calls[call] = calls.get(call, False) or rec.get("id") is not None
            p = Proposal(source=rec["source"], flags=tuple(rec.get("flags") or ()), edit=rec.get("edit", ""),
                         rationale=rec.get("rationale", ""), prior=rec.get("prior", 1.0),
                         proposer=rec.get("proposer", ""))
            if rec.get("id") is None:                   # a failed or duplicate proposal
                parent.tried.append(Attempt(edit=p.edit, status=rec["status"],
                                            message=str((rec.get("result") or {}).get("message", ""))))
                continue
            if parent is None and self.nodes:
                raise ValueError(f"record {rec['id']} has no parent but the tree already has a root")
            node = self._add(parent, p, call=call)
            by_id[rec["id"]] = node
            if rec.get("status") not in _UNFINISHED:
                self._pending.remove(node)
                node.result = Result.from_dict(dict(rec.get("result") or {}, status=rec["status"]))
                node.status = node.result.status
        if not self.nodes:
            raise ValueError("no node records to resume from")
        self.root = self.nodes[0]
        for nid, calls in produced.items():
            node = self.nodes[nid]
            node.calls = max(calls) + 1
            while node.fruitless < node.calls and not calls.get(node.calls - 1 - node.fruitless, False):
                node.fruitless += 1
            node.exhausted = node.fruitless >= config.max_fruitless
        for node in self.nodes:                         # replay backpropagation in evaluation order
            if node.status not in _UNFINISHED:
                self._score(node)
        self.observer = observer
        return self

    # -- the tree -----------------------------------------------------------------------------

    def _add(self, parent: Node | None, p: Proposal, call: int | None) -> Node:
        node = Node(id=len(self.nodes), parent=parent, source=p.source, flags=tuple(p.flags), edit=p.edit,
                    rationale=p.rationale, proposer=p.proposer, prior=p.prior if p.prior > 0 else 1e-6, call=call,
                    exchange=p.exchange)
        self.nodes.append(node)
        self._keys.setdefault(node_key(node.source, node.flags), node)
        self._pending.append(node)
        if parent is not None:
            parent.children.append(node)
            parent.tried.append(node)
        if self.observer is not None:
            self.observer.on_node_added(node)
        return node

    def _take(self, parent: Node, p: Proposal, call: int | None) -> bool:
        """Add ``p`` under ``parent`` as a pending node, or record why not; True when added."""
        if p.refused:
            status, message = Status.REFUSED, p.refused
        elif p.error:
            status, message = Status.EDIT_FAILED, p.error
        elif (same := self._keys.get(node_key(p.source, p.flags))) is not None:
            status, message = Status.DUPLICATE, f"same source and flags as node {same.id} ({same.edit})"
        else:
            self._add(parent, p, call)
            return True
        parent.tried.append(Attempt(edit=p.edit, status=status, message=message))
        if self.observer is not None:
            self.observer.on_attempt(parent, attempt_record(parent, p, status, message, call))
        return False

    def find(self, source: str, flags: Iterable[str] = ()) -> Node | None:
        return self._keys.get(node_key(source, flags))

    def best(self) -> Node | None:
        """The best verified node (never a failed one) by :func:`optiml.best.choose_best`: the
        fewest edits within the fastest node's timing noise; None when even the root failed."""
        ok = [n for n in self.nodes if n.status == Status.OK and n.median_ms and not n.unsafe]
        pick = choose_best(Ranked(n, n.median_ms, n.spread, n.depth, n.id) for n in ok)
        return None if pick is None else pick.key

    def signature(self) -> frozenset:
        """The tree as a set of (edit path, normalised source, flags, status): equal for equal runs."""
        return frozenset((n.path(), node_key(n.source, n.flags), n.status) for n in self.nodes)

    # -- evaluation ---------------------------------------------------------------------------

    def _score(self, node: Node) -> None:
        """Compute the node's reward and back it up to the root."""
        root_ms = self.root.median_ms
        if node is self.root:
            node.reward = reward(node.result, root_ms or 0.0, None)
        else:
            self.evaluations += 1
            parent = node.parent
            node.reward = reward(node.result, root_ms or 0.0, parent.median_ms, parent.spread)
        if node.status in UNSCORED:          # its machine was lost: no visit, no value
            return
        n = node
        while n is not None:
            n.visits += 1
            n.value_sum += node.reward
            n = n.parent

    def _start(self, node: Node) -> None:
        node.status = RUNNING
        if self.observer is not None:
            self.observer.on_node_started(node)

    def _submit(self, node: Node, inflight: dict[int, Node], evaluator: AsyncEvaluator) -> None:
        """Start ``node``'s evaluation without waiting for it, with a virtual visit on it and its
        ancestors until the result arrives."""
        self._start(node)
        self._count_inflight(node, +1)
        inflight[node.id] = node
        evaluator.submit(node.id, node.source, node.flags)

    @staticmethod
    def _count_inflight(node: Node, delta: int) -> None:
        """Add ``delta`` to the evaluations in flight counted on ``node`` and its ancestors."""
        while node is not None:
            node.inflight += delta
            node = node.parent

    def _collect(self, inflight: dict[int, Node], evaluator: AsyncEvaluator) -> None:
        """Wait for evaluations in flight and take every finished one, in the order they come."""
        finished = evaluator.wait()
        if not finished:
            raise RuntimeError(f"the evaluator returned nothing with {len(inflight)} evaluation(s) in flight")
        for token, ev in finished:
            if token not in inflight:            # a later result for a node already finished
                self.amend(self.nodes[token], ev)
                continue
            node = inflight.pop(token)
            self._count_inflight(node, -1)
            self._finish(node, ev)

    def _finish(self, node: Node, ev: Result | dict | None) -> None:
        result = Result.of(ev)
        node.status, node.result = result.status, result
        self._score(node)
        logger.debug("node {} ({}): {} {} reward {:.3f}", node.id, node.edit, node.status,
                     result.median_ms, node.reward)
        if self.observer is not None:
            self.observer.on_node_evaluated(node)

    def amend(self, node: Node, ev: Result | dict) -> None:
        """Replace finished ``node``'s result with a later one (a background stage's verdict: a new
        best that compute-sanitizer found ``unsafe``) and re-back the rewards it changes (its own
        and its finished children's, which compare with its median) as replaying the records
        would compute them. The root stays ``ok`` (it is every reward's reference); a root found
        unsafe only carries the verdict, and :meth:`best` passes it over."""
        if node.status in _UNFINISHED:
            raise ValueError(f"node {node.id} is not finished: there is nothing to amend")
        result = Result.of(ev)
        if node is self.root and result.status != Status.OK:
            result = replace(result, status=Status.OK)
        old = {n.id: n.reward for n in [node, *node.children] if n.status not in _UNFINISHED}
        node.status, node.result = result.status, result
        root_ms = self.root.median_ms or 0.0
        for n in [node, *node.children]:
            if n.id not in old:
                continue
            if n is self.root:
                n.reward = reward(n.result, root_ms, None)
            else:
                n.reward = reward(n.result, root_ms, n.parent.median_ms, n.parent.spread)
            delta, up = n.reward - (old[n.id] or 0.0), n
            while up is not None:
                up.value_sum += delta
                up = up.parent
        logger.debug("node {} amended: {} {}", node.id, node.status, result.message)
        if self.observer is not None:
            self.observer.on_node_amended(node)

    def settle(self) -> None:
        """Take the later results the evaluator still has to give (see :class:`Settles`), waiting
        only for the best node's: the work for the others is abandoned (the search is over)."""
        if isinstance(self.evaluator, Settles):
            best, t0 = self.best(), self.clock()
            for token, ev in self.evaluator.settle(keep=set() if best is None else {best.id}):
                self.amend(self.nodes[token], ev)
            logger.info("settled the later results in {:.2f} s", self.clock() - t0)

    # -- selection and expansion --------------------------------------------------------------

    def _dead(self, node: Node, memo: dict) -> bool:
        """Nothing more can come from this subtree: it failed, or is exhausted with dead children.
        A node in flight is not dead (its result may open it up)."""
        if node.id not in memo:
            memo[node.id] = node.status not in _UNFINISHED and (node.status != Status.OK or (
                node.exhausted and all(self._dead(c, memo) for c in node.children)))
        return memo[node.id]

    def _open(self, node: Node, memo: dict) -> bool:
        """Something can be done in this subtree now: a node in it that is not in flight may take
        another child. Without evaluations in flight, the same as not :meth:`_dead`."""
        key = ("open", node.id)
        if key not in memo:
            memo[key] = node.status == Status.OK and (
                self._expandable(node, memo) or any(self._open(c, memo) for c in node.children))
        return memo[key]

    def _held(self, node: Node) -> bool:
        """A node the focus holds back: a slow node's child, unless it is a new implementation (a
        template, a seed kernel: :func:`~optiml.edits.types.new_implementation`)."""
        return node.parent is not None and self._far(node.parent) and not new_implementation(node.edit, node.proposer)

    def _far(self, node: Node) -> bool:
        """Slower than the focus allows (see :meth:`_focus`): it waits while nodes within it have work."""
        return self._cut is not None and node.median_ms is not None and node.median_ms > self._cut

    def _focus(self) -> float | None:
        """``config.focus`` times the fastest verified time, where some node is that much slower than it
        (after a big win, most of the tree); else None."""
        if not self.config.focus:
            return None
        times = [n.median_ms for n in self.nodes if n.status == Status.OK and n.median_ms is not None and not n.unsafe]
        if not times:
            return None
        cut = self.config.focus * min(times)
        return cut if max(times) > cut else None

    def _expandable(self, node: Node, memo: dict) -> bool:
        if node.status != Status.OK or node.exhausted or self._far(node):
            return False
        limit = node.widening_limit(self.config.k_w, self.config.alpha)
        return len(node.children) < limit or all(self._dead(c, memo) for c in node.children)

    def _select_child(self, node: Node, memo: dict) -> Node | None:
        """The open child with the highest PUCT. An evaluation in flight below a node counts as a
        visit of it in the exploration term (not in Q; see the module docstring)."""
        live = [c for c in node.children if not self._dead(c, memo)]
        choice = [c for c in live if self._open(c, memo)]
        if not choice:
            return None
        total_prior = sum(c.prior for c in live)
        sqrt_n = math.sqrt(max(node.visits + node.inflight, 1))

        def puct(c: Node) -> float:
            return c.q + self.config.c_puct * (c.prior / total_prior) * sqrt_n / (1 + c.visits + c.inflight)
        return max(choice, key=puct)     # max keeps the first (oldest) of equals

    def view(self, node: Node) -> NodeView:
        inherited, up = [], node.parent
        while up is not None:
            inherited[:0] = up.attempts()
            up = up.parent
        return NodeView(source=node.source, flags=node.flags, entry=self.entry, metrics=node.metrics,
                        diagnosis=node.diagnosis, median_ms=node.median_ms,
                        resources=dict(node.result.resources), attempts=node.attempts(),
                        task=self.task, inherited=tuple(inherited),
                        measured=tuple(Measured(n.source, n.flags, str(n.status), n.median_ms) for n in self.nodes))

    def _expand(self, node: Node) -> bool:
        call = node.calls
        node.calls += 1
        rng = random.Random(f"{self.config.seed}:{node.id}:{call}")
        k = max(1, node.widening_limit(self.config.k_w, self.config.alpha) - len(node.children))
        proposals = list(self.proposer.propose(self.view(node), k, rng))
        for p in proposals:                  # refusals are records, not candidates: outside the k
            if p.refused:
                self._take(node, p, call)
        proposals = [p for p in proposals if not p.refused][:k]
        added = sum(self._take(node, p, call) for p in proposals)
        if not proposals:
            node.exhausted = True
        elif not added:
            node.fruitless += 1
            node.exhausted = node.fruitless >= self.config.max_fruitless
        else:
            node.fruitless = 0
        return added > 0

    def _step(self) -> bool:
        """Select a node and expand it; False when nothing can be expanded now: the whole tree is
        exhausted, or (with evaluations in flight) what is left waits on their results.

        The focus: once some node is more than ``config.focus`` times slower than the fastest, such
        nodes take no new child while a node within the focus can (or waits on an evaluation in
        flight below it); only then do the slow ones take children again, so the budget goes where
        the best is, yet a search whose near moves run out still uses it."""
        self._cut = self._focus()
        node = self.root
        while True:
            memo: dict = {}
            if not self._open(self.root, memo):
                if self._cut is None or self._near_inflight():
                    return False
                self._cut, node = None, self.root     # nothing within the focus is left: the slow nodes' turn
                continue
            if self._expandable(node, memo):
                if self._expand(node):
                    return True
                continue                  # nothing new: ask again, or it is now exhausted
            nxt = self._select_child(node, memo)
            node = self.root if nxt is None else nxt   # None: it has just become a dead end

    def _near_inflight(self) -> bool:
        """An evaluation in flight that the focus does not hold back (its result may open more work there)."""
        return any(n.status == RUNNING and n.parent is not None and not self._held(n) for n in self.nodes)

    def _withdraw_far(self, inflight: dict[int, Node], evaluator) -> None:
        """Under the focus, take back the evaluations in flight of slow nodes' children that have not
        started (see :class:`Withdraws`), while near work is left to take their places: each goes
        back to pending, behind the near work (:meth:`_next_pending`)."""
        if not isinstance(evaluator, Withdraws):
            return
        self._cut = self._focus()
        if self._cut is None:
            return
        far = [n for n in inflight.values() if self._held(n)]
        if not far or not (self._open(self.root, {}) or any(p.parent is not None and not self._held(p)
                                                              for p in self._pending)):
            return
        for node in far:
            if not evaluator.withdraw(node.id):
                continue
            del inflight[node.id]
            self._count_inflight(node, -1)
            node.status = PENDING
            self._pending.append(node)
            logger.debug("node {} withdrawn: its parent is over the focus", node.id)
            if self.observer is not None and hasattr(self.observer, "on_node_withdrawn"):
                self.observer.on_node_withdrawn(node)

    def _next_pending(self) -> Node | None:
        """The oldest pending node, except that while the focus holds (see :meth:`_step`) the children
        of slow nodes wait for the others; None where only those are left and near work remains."""
        self._cut = self._focus()
        for i, n in enumerate(self._pending):
            if not self._held(n):
                return self._pending.pop(i)
        if self._cut is not None and (self._open(self.root, {}) or self._near_inflight()):
            return None
        return self._pending.pop(0)

    def run(self, budget: int | None = None, time_limit_s: float | None = None) -> Node | None:
        """Search until ``budget`` candidates in all are evaluated, the time limit passes or nothing
        new is proposed anywhere; returns :meth:`best`. With ``config.parallel`` > 1 and an
        :class:`AsyncEvaluator`, up to ``parallel`` evaluations are kept in flight; otherwise one
        at a time, through the same loop."""
        budget = self.config.budget if budget is None else budget
        limit = self.config.time_limit_s if time_limit_s is None else time_limit_s
        deadline = None if limit is None else self.clock() + limit
        if is_async(self.evaluator):
            evaluator, parallel = self.evaluator, max(1, self.config.parallel)
        else:
            evaluator, parallel = _OneAtATime(self.evaluator), 1
        if self.root.status in _UNFINISHED:           # alone: every reward needs its time
            self._pending.remove(self.root)
            inflight: dict[int, Node] = {}
            self._submit(self.root, inflight, evaluator)
            while inflight:
                self._collect(inflight, evaluator)
        if self.root.status != Status.OK:
            logger.warning("the root kernel did not verify ({}): nothing to search from", self.root.status)
            return None
        self._run_in_flight(budget, deadline, parallel, evaluator)
        self.settle()
        return self.best()

    def _run_in_flight(self, budget: int, deadline: float | None, parallel: int, evaluator: AsyncEvaluator) -> None:
        """:meth:`run`'s loop with up to ``parallel`` evaluations in flight: submit pending nodes
        (oldest first), or select and expand to make more, while the budget (counting those in
        flight) and the time allow; then wait for results. Past the time limit nothing more is
        submitted, but what is in flight is waited for, so no node is left running."""
        inflight: dict[int, Node] = {}
        exhausted = False
        self.stopped = None
        while True:
            while (len(inflight) < parallel and self.evaluations + len(inflight) < budget
                   and (deadline is None or self.clock() < deadline)):
                nxt = self._next_pending() if self._pending else None
                if nxt is not None:
                    self._submit(nxt, inflight, evaluator)
                elif not self._step():
                    if self._pending and not inflight:   # only the slow nodes' children are left
                        self._submit(self._pending.pop(0), inflight, evaluator)
                        continue
                    exhausted = not inflight and not self._pending   # else: what is left waits on results
                    break
            if not inflight:
                break
            self._collect(inflight, evaluator)
            self._withdraw_far(inflight, evaluator)
        if exhausted:
            logger.info("every node is exhausted after {} evaluations", self.evaluations)
        self.stopped = ("exhausted" if exhausted else "time_limit" if deadline is not None and self.clock() >= deadline
                        and self.evaluations < budget else "budget")


class _OneAtATime:
    """An :class:`Evaluator` seen as an :class:`AsyncEvaluator` with one evaluation in flight:
    ``wait`` evaluates what was submitted."""

    def __init__(self, evaluator: Evaluator):
        self.evaluator = evaluator
        self._queue: list[tuple[int, str, tuple[str, ...]]] = []

    def submit(self, token: int, source: str, flags: tuple[str, ...]) -> None:
        self._queue.append((token, source, flags))

    def wait(self) -> list[tuple[int, Result]]:
        done, self._queue = self._queue, []
        return [(token, self.evaluator.evaluate(source, flags)) for token, source, flags in done]
