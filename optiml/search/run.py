"""Adapters between the search and the rest: the evaluation pipeline behind the search's
Evaluator protocol, and a trace-store observer that writes each node before and after its
evaluation."""
from __future__ import annotations

from dataclasses import asdict

from .tree import Node


class PipelineEvaluator:
    """``search.Evaluator`` over ``pipeline.Evaluator``: a Candidate in, a result dict out."""

    def __init__(self, evaluator, on_done=None):
        self.evaluator = evaluator
        self.on_done = on_done
        self.last = None                  # the last pipeline Evaluation (for the store)

    def evaluate(self, source: str, flags) -> dict:
        from ..pipeline import Candidate

        ev = self.evaluator.evaluate(Candidate(source, tuple(flags)))
        self.last = ev
        hr, prof = ev.harness, ev.profile
        result = {
            "status": ev.status,
            "message": ev.message,
            "median_ms": ev.median_ms,
            "spread": hr.timing.spread if hr is not None and hr.timing is not None else None,
            "metrics": dict(prof.metrics) if prof is not None and prof.ok else {},
            "diagnosis": list(prof.diagnosis) if prof is not None and prof.ok else [],
            "resources": asdict(ev.resources) if ev.resources else {},
            "stage_s": dict(ev.stage_s),
        }
        if self.on_done:
            self.on_done(ev, result)
        return result


class StoreObserver:
    """Writes the search's nodes to a TraceStore: pending and running before the work, the
    evaluation and final status after, each in its own transaction."""

    def __init__(self, store, run_id: int, evaluator: PipelineEvaluator):
        self.store, self.run_id, self.evaluator = store, run_id, evaluator
        self.ids: dict[int, int] = {}     # search node id -> store node id

    def on_node_added(self, node: Node) -> None:
        parent = self.ids.get(node.parent.id) if node.parent is not None else None
        nid = self.store.add_node(self.run_id, parent, node.source, flags={"extra": list(node.flags)},
                                  edit=node.edit, rationale=node.rationale, proposer=node.proposer)
        self.ids[node.id] = nid

    def on_node_evaluated(self, node: Node) -> None:
        nid = self.ids[node.id]
        self.store.mark_running(nid)
        ev = self.evaluator.last
        r = node.result
        evaluation = {
            "status": node.status,
            "median_ms": r.get("median_ms"),
            "metrics": r.get("metrics") or {},
            "diagnosis": r.get("diagnosis") or [],
            "reward": node.reward,
            "reward_version": r.get("reward_version"),
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
        self.store.record_proposal(self.run_id, node_id=self.ids.get(parent.id), proposer=record.get("proposer"),
                                   parsed_edits=record, error=record.get("status"))
