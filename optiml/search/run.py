"""Adapters between the search and the rest: the evaluation pipeline behind the search's
Evaluator (and, where the pipeline can take several candidates at once, AsyncEvaluator) protocol,
and a trace-store observer that writes each node before and after its evaluation."""
from __future__ import annotations

import concurrent.futures
from dataclasses import asdict

from .tree import Node


def search_result(ev) -> dict:
    """The search's result dict of a pipeline ``Evaluation``."""
    hr, prof = ev.harness, ev.profile
    return {
        "status": ev.status,
        "message": ev.message,
        "median_ms": ev.median_ms,
        "spread": hr.timing.spread if hr is not None and hr.timing is not None else None,
        "metrics": dict(prof.metrics) if prof is not None and prof.ok else {},
        "diagnosis": list(prof.diagnosis) if prof is not None and prof.ok else [],
        "resources": asdict(ev.resources) if ev.resources else {},
        "stage_s": dict(ev.stage_s),
        "speed_of_light": ev.speed_of_light,
    }


class PipelineEvaluator:
    """``search.Evaluator`` over ``pipeline.Evaluator``: a Candidate in, a result dict out.

    When the pipeline has ``submit(candidate) -> Future[Evaluation]``, this is also a
    ``search.AsyncEvaluator``: it has ``submit`` and ``wait`` (bound in ``__init__``, so one over a
    pipeline without ``submit`` has neither and the search evaluates one candidate at a time).
    ``on_done(evaluation, result)`` is called for every finished candidate either way; the full
    Evaluation is kept in ``last`` (one at a time) or ``details[token]`` (in flight) for the store."""

    def __init__(self, evaluator, on_done=None):
        self.evaluator = evaluator
        self.on_done = on_done
        self.last = None                  # the last pipeline Evaluation (for the store)
        self.details: dict[int, object] = {}   # token -> Evaluation of finished submitted candidates
        self._futures: dict[concurrent.futures.Future, int] = {}
        if callable(getattr(evaluator, "submit", None)):
            self.submit, self.wait = self._submit, self._wait

    def _done(self, ev) -> dict:
        result = search_result(ev)
        if self.on_done:
            self.on_done(ev, result)
        return result

    def evaluate(self, source: str, flags) -> dict:
        from ..pipeline import Candidate

        ev = self.evaluator.evaluate(Candidate(source, tuple(flags)))
        self.last = ev
        return self._done(ev)

    def _submit(self, token: int, source: str, flags) -> None:
        from ..pipeline import Candidate

        self._futures[self.evaluator.submit(Candidate(source, tuple(flags)))] = token

    def _wait(self) -> list[tuple[int, dict]]:
        done, _ = concurrent.futures.wait(list(self._futures), return_when=concurrent.futures.FIRST_COMPLETED)
        out = []
        for fut in [f for f in self._futures if f in done]:          # in submission order
            token = self._futures.pop(fut)
            ev = fut.result()             # a pipeline that raised has a bug: let it out
            self.details[token] = ev
            out.append((token, self._done(ev)))
        return out


class StoreObserver:
    """Writes the search's nodes to a TraceStore: pending before the work, running when it
    starts, the evaluation and final status after, each in its own transaction; proposer calls
    (LLM exchanges) once each, and proposals that never became nodes as attempts.

    ``ids`` maps search node ids to store node ids; a resumed search passes the mapping of the
    nodes it was rebuilt from (see :func:`resume_ids`)."""

    def __init__(self, store, run_id: int, evaluator: PipelineEvaluator, ids: dict[int, int] | None = None):
        self.store, self.run_id, self.evaluator = store, run_id, evaluator
        self.ids: dict[int, int] = dict(ids or {})
        self._exchanges: dict[int, int] = {}     # id() of an exchange dict -> proposals row

    def _exchange(self, parent_id: int | None, proposer: str, exchange: dict | None) -> int | None:
        if not exchange:
            return None
        key = id(exchange)
        if key not in self._exchanges:
            x = exchange
            self._exchanges[key] = self.store.record_proposal(
                self.run_id, node_id=parent_id, proposer=proposer, model=x.get("model"), prompt=x.get("prompt"),
                raw_answer=x.get("raw_answer"), parsed_edits=x.get("parsed_edits"), tokens_in=x.get("tokens_in"), tokens_out=x.get("tokens_out"),
                latency_s=x.get("latency_s"), error=x.get("error"), kind="exchange")
        return self._exchanges[key]

    def on_node_added(self, node: Node) -> None:
        parent = self.ids.get(node.parent.id) if node.parent is not None else None
        pid = self._exchange(parent, node.proposer, node.exchange)
        nid = self.store.add_node(self.run_id, parent, node.source, flags={"extra": list(node.flags)},
                                  edit=node.edit, rationale=node.rationale, proposer=node.proposer,
                                  prior=node.prior, call=node.call, proposal_id=pid)
        self.ids[node.id] = nid

    def on_node_started(self, node: Node) -> None:
        self.store.mark_running(self.ids[node.id])

    def on_node_evaluated(self, node: Node) -> None:
        nid = self.ids[node.id]
        details = getattr(self.evaluator, "details", None) or {}
        ev = details.pop(node.id) if node.id in details else getattr(self.evaluator, "last", None)
        r = node.result
        evaluation = {
            "status": node.status,
            "median_ms": r.get("median_ms"),
            "metrics": r.get("metrics") or {},
            "diagnosis": r.get("diagnosis") or [],
            "reward": node.reward,
            "reward_version": r.get("reward_version"),
            "result": {k: v for k, v in r.items() if k not in ("reward", "reward_version")},
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
        self.store.finish_node(nid, evaluation, "done" if node.status == "ok" else "failed")
        self.store.update_stats(nid, node.visits, node.value_sum)

    def on_attempt(self, parent: Node, record: dict) -> None:
        record = dict(record)
        exchange = record.pop("exchange", None)
        parent_id = self.ids.get(parent.id)
        self._exchange(parent_id, record.get("proposer") or "", exchange)
        self.store.record_proposal(self.run_id, node_id=parent_id, proposer=record.get("proposer"),
                                   parsed_edits=record, error=(record.get("result") or {}).get("message") or record.get("status"),
                                   kind="attempt")


def resume_ids(records: list[dict]) -> dict[int, int]:
    """Search node ids (creation order) to the store ids of the node records they came from."""
    return {i: rec["id"] for i, rec in enumerate(r for r in records if r.get("id") is not None)}


def resume_search(store, run_id: int, evaluator, proposer, *, config, task: str = "", entry: str = ""):
    """Rebuild run ``run_id``'s search from the store (nothing stored is evaluated again; nodes a
    dead process left running are evaluated first) with an observer that goes on writing to it."""
    from .mcts import MCTS

    store.reset_stale(run_id)
    records = store.search_records(run_id)
    observer = StoreObserver(store, run_id, evaluator, ids=resume_ids(records))
    return MCTS.from_records(records, evaluator, proposer, config=config, observer=observer, task=task, entry=entry)
