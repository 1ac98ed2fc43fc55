"""The trace database's schema, as append-only sqlite-utils migrations.

Never edit a migration that has shipped: add a new function below the last one. Each migration
runs once, in order, inside a transaction, and is recorded in ``_sqlite_migrations``.
"""
from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("optiml.traces")

NODE_STATUSES = ("pending", "running", "done", "failed")


@migrations()
def m001_initial(db: Database) -> None:
    db["runs"].create({
        "id": int, "task": str, "spec_toml": str, "kernel_source": str, "config_json": str,
        "seed": int, "budget": int, "device": str, "nvcc_version": str, "ncu_version": str,
        "driver_version": str, "status": str, "created_at": str, "updated_at": str,
    }, pk="id", not_null={"task", "status", "created_at", "updated_at"})
    db["sources"].create({"hash": str, "text": str}, pk="hash", not_null={"text"})
    db["nodes"].create({
        "id": int, "run_id": int, "parent_id": int, "source_hash": str, "flags_json": str,
        "edit": str, "rationale": str, "proposer": str, "depth": int, "status": str,
        "visits": int, "value_sum": float, "worker_pid": int, "worker_host": str,
        "created_at": str, "updated_at": str,
    }, pk="id", not_null={"run_id", "source_hash", "depth", "status", "visits", "value_sum"},
        defaults={"visits": 0, "value_sum": 0.0, "depth": 0, "status": "pending"},
        foreign_keys=[("run_id", "runs", "id"), ("parent_id", "nodes", "id"),
                      ("source_hash", "sources", "hash")])
    db["evaluations"].create({
        "id": int, "node_id": int, "status": str, "build_json": str, "build_log": str,
        "verify_json": str, "timing_json": str, "median_ms": float, "metrics_json": str,
        "raw_ncu_csv": str, "diagnosis_json": str, "reward": float, "reward_version": str,
        "wall_s": float, "created_at": str,
    }, pk="id", not_null={"node_id", "status"}, foreign_keys=[("node_id", "nodes", "id")])
    db["proposals"].create({
        "id": int, "run_id": int, "node_id": int, "proposer": str, "model": str, "prompt": str,
        "raw_answer": str, "parsed_edits_json": str, "tokens_in": int, "tokens_out": int,
        "latency_s": float, "error": str, "created_at": str,
    }, pk="id", not_null={"run_id"},
        foreign_keys=[("run_id", "runs", "id"), ("node_id", "nodes", "id")])
    db["evaluations"].create_index(["node_id"], unique=True)
    db["nodes"].create_index(["run_id", "status"])
    db["nodes"].create_index(["parent_id"])
    db["nodes"].create_index(["run_id", "source_hash"])
    db["nodes"].create_index(["source_hash"])
    db["proposals"].create_index(["run_id"])
    db["proposals"].create_index(["node_id"])


@migrations()
def m002_resume(db: Database) -> None:
    """What a resumed search needs and the final figure of a run.

    nodes: the proposer's prior, the index of the proposer call on the parent that produced it
    (``call``) and the proposals row of that call (``proposal_id``, an LLM exchange).
    proposals: ``kind`` (``exchange``: one proposer call with its prompt and answer; ``attempt``:
    a proposal that never became a node, an edit that did not apply or a duplicate) and ``seq``
    (the run's newest node id when it was written, to replay attempts in order).
    evaluations: ``result_json``, the evaluation as the search saw it (status, message, median,
    spread, metrics, diagnosis, resources), so a resumed search scores it without a GPU.
    runs: ``result_json``, the final interleaved re-timing of the best kernel against the seed.
    """
    db["nodes"].add_column("prior", float)
    db["nodes"].add_column("call", int)
    db["nodes"].add_column("proposal_id", int)
    db["proposals"].add_column("kind", str)
    db["proposals"].add_column("seq", int)
    db["evaluations"].add_column("result_json", str)
    db["runs"].add_column("result_json", str)
    db["proposals"].create_index(["run_id", "kind"])
