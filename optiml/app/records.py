"""The search's records in the trace store: the observer that writes each node before and after
its evaluation, the records a resumed search is rebuilt from, and the best stored node.

The store keeps data; what the search's records look like (``optiml.search.tree``) and which node
is the best (``optiml.best``) are decided here and there, not in the store."""
from __future__ import annotations

from dataclasses import asdict
from typing import Protocol, runtime_checkable

from ..best import choose_best
from ..search.mcts import MCTS
from ..search.result import Result
from ..search.reward import REWARD_VERSION
from ..search.tree import Node
from ..status import Category, Status, category
from ..traces.store import TraceStore, stored_spread


@runtime_checkable
class KeepsEvaluations(Protocol):
    def take(self, token: int):
        """The full evaluation of finished node ``token`` (build, verification, timing, profile), or None."""


class StoreObserver:
    """Writes the search's nodes to a TraceStore: pending before the work, running when it
    starts, the evaluation and final status after, each in its own transaction; proposer calls
    (LLM exchanges) once each, and proposals that never became nodes as attempts.

    ``ids`` maps search node ids to store node ids; a resumed search passes the mapping of the
    nodes it was rebuilt from (see :func:`resume_ids`). ``evaluator`` (when it keeps them) gives
    each finished node's full Evaluation: build log, verification, timing, raw ncu CSV."""

    def __init__(self, store: TraceStore, run_id: int, evaluator=None, ids: dict[int, int] | None = None):
        self.store, self.run_id = store, run_id
        self.evaluator = evaluator if isinstance(evaluator, KeepsEvaluations) else None
        self.ids: dict[int, int] = dict(ids or {})
        # id() of an exchange dict -> (proposals row, the dict): holding the dict keeps its id from
        # being given to a later one while the observer lives
        self._exchanges: dict[int, tuple[int, dict]] = {}

    def _exchange(self, parent_id: int | None, proposer: str, exchange: dict | None) -> int | None:
        if not exchange:
            return None
        key = id(exchange)
        if key not in self._exchanges:
            x = exchange
            row = self.store.record_proposal(
                self.run_id, node_id=parent_id, proposer=proposer, model=x.get("model"), prompt=x.get("prompt"),
                raw_answer=x.get("raw_answer"), parsed_edits=x.get("parsed_edits"), tokens_in=x.get("tokens_in"),
                tokens_out=x.get("tokens_out"), latency_s=x.get("latency_s"), error=x.get("error"), kind="exchange")
            self._exchanges[key] = (row, exchange)
        return self._exchanges[key][0]

    def on_node_added(self, node: Node) -> None:
        parent = self.ids.get(node.parent.id) if node.parent is not None else None
        pid = self._exchange(parent, node.proposer, node.exchange)
        nid = self.store.add_node(self.run_id, parent, node.source, flags={"extra": list(node.flags)},
                                  edit=node.edit, rationale=node.rationale, proposer=node.proposer,
                                  prior=node.prior, call=node.call, proposal_id=pid)
        self.ids[node.id] = nid

    def on_node_started(self, node: Node) -> None:
        self.store.mark_running(self.ids[node.id])

    def on_node_withdrawn(self, node: Node) -> None:
        self.store.mark_pending(self.ids[node.id])

    def on_node_evaluated(self, node: Node) -> None:
        nid = self.ids[node.id]
        ev = self.evaluator.take(node.id) if self.evaluator is not None else None
        r = node.result
        evaluation = {
            "status": str(node.status),
            "median_ms": r.median_ms,
            "metrics": dict(r.metrics),
            "diagnosis": list(r.diagnosis),
            "reward": node.reward,
            "reward_version": REWARD_VERSION,
            "result": r.to_dict(),
        }
        if ev is not None:
            evaluation.update({
                "build": ev.build.to_dict() if ev.build else None,
                "build_log": ev.build.log if ev.build else None,
                "verify": ev.harness.to_dict() if ev.harness else {"message": ev.message},
                "timing": asdict(ev.harness.timing) if ev.harness and ev.harness.timing else None,
                "raw_ncu_csv": ev.profile.raw_csv if ev.profile is not None else None,
                "wall_s": ev.wall_s,
            })
        self.store.finish_node(nid, evaluation, "done" if node.status == Status.OK else "failed")
        self._stats(node)

    def on_node_amended(self, node: Node) -> None:
        r = node.result
        self.store.amend_evaluation(self.ids[node.id], status=str(node.status), result=r.to_dict(),
                                    reward=node.reward, node_status="done" if node.status == Status.OK else "failed")
        self._stats(node, node.children)

    def _stats(self, node: Node, also=()) -> None:
        """The visits and value sums that backpropagating ``node``'s reward changed: its own and
        every ancestor's (and, for an amendment, its children's, whose rewards compare with it)."""
        changed, up = list(also), node
        while up is not None:
            changed.append(up)
            up = up.parent
        self.store.update_stats_many([(self.ids[n.id], n.visits, n.value_sum) for n in changed if n.id in self.ids])

    def on_attempt(self, parent: Node, record: dict) -> None:
        record = dict(record)
        exchange = record.pop("exchange", None)
        parent_id = self.ids.get(parent.id)
        self._exchange(parent_id, record.get("proposer") or "", exchange)
        self.store.record_proposal(self.run_id, node_id=parent_id, proposer=record.get("proposer"),
                                   parsed_edits=record, error=(record.get("result") or {}).get("message") or record.get("status"),
                                   kind="attempt")


class Tee:
    """Several observers as one (the store's, and a progress printer), told in order."""

    def __init__(self, *observers):
        self.observers = [o for o in observers if o is not None]

    def on_node_added(self, node: Node) -> None:
        for o in self.observers:
            o.on_node_added(node)

    def on_node_started(self, node: Node) -> None:
        for o in self.observers:
            o.on_node_started(node)

    def on_node_evaluated(self, node: Node) -> None:
        for o in self.observers:
            o.on_node_evaluated(node)

    def on_node_withdrawn(self, node: Node) -> None:
        for o in self.observers:
            if hasattr(o, "on_node_withdrawn"):
                o.on_node_withdrawn(node)

    def on_node_amended(self, node: Node) -> None:
        for o in self.observers:
            o.on_node_amended(node)

    def on_attempt(self, parent: Node, record: dict) -> None:
        for o in self.observers:
            o.on_attempt(parent, record)


def _result(e: dict) -> dict:
    """The search's result of an evaluations row (``result_json`` since schema m002; rebuilt from
    the other columns for older rows)."""
    if e.get("result"):
        return Result.from_dict(e["result"]).to_dict()
    build = e.get("build") or {}
    return Result(status=e["status"], message=(e.get("verify") or {}).get("message", ""),
                  median_ms=e.get("median_ms"), spread=stored_spread(None, e.get("timing")),
                  metrics=e.get("metrics") or {}, diagnosis=tuple(e.get("diagnosis") or ()),
                  resources=build.get("resources") or {}).to_dict()


def stored_records(store: TraceStore, run_id: int) -> list[dict]:
    """Run ``run_id`` as the search's records (see ``optiml.search.tree``), in the order they were
    written: every node with its evaluation as the search saw it (``pending`` where it has none
    yet), and every attempt (a proposal that did not become a node) after the node that was
    newest when it was made. Ids are the store's node ids."""
    records: list[tuple[tuple, dict]] = []
    nodes = store.nodes(run_id)
    for n in nodes:
        e = store.evaluation(n.id)
        rec = {"id": n.id, "parent": n.parent_id, "source": store.source(n.source_hash),
               "flags": list((n.flags or {}).get("extra") or ()), "edit": n.edit or "",
               "rationale": n.rationale or "", "proposer": n.proposer or "",
               "prior": n.prior if n.prior is not None else 1.0, "call": n.call}
        if e is None:
            rec.update(status=str(Status.PENDING), result={}, reward=None)
        else:
            rec.update(status=e["status"], result=_result(e), reward=e.get("reward"))
        records.append(((n.id, 0, 0), rec))
    times = None                    # node creation times, for attempts written before schema m002
    for p in store.proposals(run_id=run_id):
        rec = p["parsed_edits"]
        if p.get("kind") == "exchange" or not isinstance(rec, dict) or rec.get("id", 0) is not None \
                or category(rec.get("status")) is not Category.NOT_EVALUATED:
            continue
        seq = p.get("seq")
        if seq is None:        # written before schema m002: place it by time
            times = times or store.node_times(run_id)
            seq = max((nid for nid, created in times if created <= p["created_at"]),
                      default=nodes[0].id if nodes else 0)
        records.append(((seq, 1, p["id"]), dict(rec, parent=p["node_id"])))
    return [r for _, r in sorted(records, key=lambda kr: kr[0])]


def resume_ids(records: list[dict]) -> dict[int, int]:
    """Search node ids (creation order) to the store ids of the node records they came from."""
    return {i: rec["id"] for i, rec in enumerate(r for r in records if r.get("id") is not None)}


def resume_search(store: TraceStore, run_id: int, evaluator, proposer, *, config, task: str = "",
                  entry: str = "") -> MCTS:
    """Rebuild run ``run_id``'s search from the store (nothing stored is evaluated again; nodes a
    dead process left running are evaluated first) with an observer that goes on writing to it."""
    store.reset_stale(run_id)
    records = stored_records(store, run_id)
    observer = StoreObserver(store, run_id, evaluator, ids=resume_ids(records))
    return MCTS.from_records(records, evaluator, proposer, config=config, observer=observer, task=task, entry=entry)


def best_node(store: TraceStore, run_id: int):
    """The best verified node of a stored run by the search's own rule (:func:`optiml.best.choose_best`:
    the fewest edits within the fastest node's timing noise); a failed candidate is never best."""
    pick = choose_best(store.verified(run_id))
    return None if pick is None else store.node(pick.key)


def best_of_run(store: TraceStore, run_id: int):
    """The node whose kernel the run's final line names: the one `optimize` wrote (``best_node`` in
    the final figure), or for runs stored before that was kept, the verified node whose edits are
    the final figure's ``best_edits``; for an unfinished run, the best stored node by the search's
    rule (:func:`best_node`). None when nothing verified."""
    from ..errors import UserError

    final = store.run(run_id).get("result") or {}
    if isinstance(final.get("best_node"), int):
        try:
            node = store.node(final["best_node"])
        except UserError:
            node = None
        if node is not None and node.run_id == run_id:
            return node
    edits = final.get("best_edits")
    if isinstance(edits, list):
        verified = {r.key for r in store.verified(run_id)}
        for node in store.nodes(run_id):
            if node.id in verified and [n.edit for n in store.path_to(node.id)[1:]] == edits:
                return node
    return best_node(store, run_id)
