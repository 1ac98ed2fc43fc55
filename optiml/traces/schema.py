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
