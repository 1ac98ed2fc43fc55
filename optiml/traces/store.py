"""The trace store: every run, candidate, evaluation and proposal in one SQLite file.

Write before work: a candidate's node row exists (``pending``) before its evaluation starts,
is marked ``running`` (with the worker's pid and host) when it starts, and ``finish_node``
writes the evaluation row and moves the node to ``done``/``failed`` in one transaction. A run
killed at any instant therefore leaves a consistent database, and ``reset_stale`` puts rows
left ``running`` by a dead worker back to ``pending`` on resume.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from contextlib import contextmanager
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from loguru import logger
from sqlite_utils import Database

from ..best import Ranked
from ..errors import UserError
from . import DB_ENV, DEFAULT_DB
from ..status import Status
from .schema import NODE_STATUSES, migrations

OK = str(Status.OK)  # the evaluation status of a built, verified and timed candidate

_EVAL_JSON = ("build", "verify", "timing", "metrics", "diagnosis", "result")
_EVAL_PLAIN = ("build_log", "median_ms", "raw_ncu_csv", "reward", "reward_version", "wall_s")


def default_db_path() -> Path:
    """``$OPTIML_DB`` when set, else ``./optiml.db``."""
    return Path(os.environ.get(DB_ENV) or DEFAULT_DB)


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass(frozen=True)
class Node:
    id: int
    run_id: int
    parent_id: int | None
    source_hash: str
    flags: dict | None
    edit: str | None
    rationale: str | None
    proposer: str | None
    depth: int
    status: str
    visits: int
    value_sum: float
    prior: float | None = None
    call: int | None = None           # the parent's proposer call that produced it
    proposal_id: int | None = None    # the proposals row of that call (an LLM exchange)


def _node(row: dict) -> Node:
    return Node(id=row["id"], run_id=row["run_id"], parent_id=row["parent_id"],
                source_hash=row["source_hash"], flags=_loads(row["flags_json"]), edit=row["edit"],
                rationale=row["rationale"], proposer=row["proposer"], depth=row["depth"],
                status=row["status"], visits=row["visits"], value_sum=row["value_sum"],
                prior=row.get("prior"), call=row.get("call"), proposal_id=row.get("proposal_id"))


class TraceStore:
    """One SQLite trace database (WAL, foreign keys on, busy timeout), migrated on open.

    ``read_only``: for viewing. The file is opened with ``mode=ro`` and never migrated nor
    written: a database whose schema is older than this code is a UserError naming
    ``optiml upgrade``. When no writer has the database open (no ``-wal`` file beside it) it is
    opened ``immutable``, so that viewing creates no ``-wal``/``-shm`` files and works in a
    read-only folder; while a writer is at work its ``-wal`` is read as SQLite reads it."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True,
                 timeout_s: float = 10.0, read_only: bool = False):
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = read_only
        self.migrated: list[str] = []
        if (read_only or not create) and not self.path.is_file():
            raise UserError(f"{self.path}: no trace database here (pass --db or set {DB_ENV}).")
        try:
            if read_only:
                wal = Path(f"{self.path}-wal").exists()
                uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("" if wal else "&immutable=1")
                conn = sqlite3.connect(uri, uri=True, timeout=timeout_s)
            else:
                conn = sqlite3.connect(str(self.path), timeout=timeout_s)
        except sqlite3.OperationalError as e:
            raise self._user_error(e) from None
        self.db = Database(conn)
        with self._errors():
            conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            if read_only:
                self._check_schema()
                return
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            pending = [m.name for m in migrations.pending(self.db)]
            if pending:
                logger.info("{}: applying {} migration(s)", self.path, len(pending))
                migrations.apply(self.db)
            self.migrated = pending      # the migrations this open applied (`optiml upgrade` reports them)

    def _check_schema(self) -> None:
        """A read-only database must already have every migration this code knows."""
        if not migrations.applied(self.db):
            self.close()
            raise UserError(f"{self.path}: not an optiml trace database (it has none of optiml's tables).")
        if migrations.pending(self.db):
            self.close()
            raise UserError(f"{self.path}: the trace database was written by an older optiml;"
                            f" run `optiml upgrade --db {self.path}` to bring its schema up to date.")

    # ------------------------------------------------------------------ plumbing
    def _user_error(self, e: Exception) -> Exception:
        msg = str(e).lower()
        if "locked" in msg or "busy" in msg:
            return UserError(f"{self.path}: the trace database is locked by another optiml process.")
        if "readonly" in msg or "unable to open" in msg or "read-only" in msg:
            return UserError(f"{self.path}: cannot write the trace database (check the path and its permissions).")
        if "not a database" in msg or "malformed" in msg:
            return UserError(f"{self.path}: not an optiml trace database (the file is not SQLite or is damaged).")
        return e  # not ours to translate: re-raised as is

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite errors a user can fix (locked, read-only, not a database) become UserErrors."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as e:
            raise self._user_error(e) from None

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, taking the write lock up front (BEGIN IMMEDIATE) so that
        concurrent writers wait on busy_timeout instead of failing on a lock upgrade."""
        conn = self.db.conn
        with self._errors():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> "TraceStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _one(self, sql: str, params: tuple = ()) -> dict | None:
        with self._errors():
            cur = self.db.execute(sql, params)
            row = cur.fetchone()
            return None if row is None else dict(zip([c[0] for c in cur.description], row))

    def _all(self, sql: str, params: tuple = ()) -> list[dict]:
        with self._errors():
            cur = self.db.execute(sql, params)
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    # ------------------------------------------------------------------ runs
    def start_run(self, task: str, *, spec_toml: str | None = None, kernel_source: str | None = None,
                  config: dict | None = None, seed: int | None = None, budget: int | None = None,
                  device: str | None = None, nvcc_version: str | None = None,
                  ncu_version: str | None = None, driver_version: str | None = None) -> int:
        now = _now()
        with self._write():
            cur = self.db.execute(
                "INSERT INTO runs (task, spec_toml, kernel_source, config_json, seed, budget, device,"
                " nvcc_version, ncu_version, driver_version, status, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (task, spec_toml, kernel_source, _dumps(config), seed, budget, device, nvcc_version,
                 ncu_version, driver_version, "running", now, now))
            return cur.lastrowid

    def set_run_status(self, run_id: int, status: str) -> None:
        with self._write():
            self.db.execute("UPDATE runs SET status = ?, updated_at = ? WHERE id = ?", (status, _now(), run_id))

    def run(self, run_id: int) -> dict:
        row = self._one("SELECT * FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise UserError(f"{self.path}: no run {run_id} (see `optiml runs`).")
        row["config"] = _loads(row.pop("config_json"))
        row["result"] = _loads(row.pop("result_json", None))
        return row

    def set_run_result(self, run_id: int, result: dict) -> None:
        """The run's final figure (the interleaved re-timing of the best against the seed)."""
        with self._write():
            self.db.execute("UPDATE runs SET result_json = ?, updated_at = ? WHERE id = ?",
                            (_dumps(result), _now(), run_id))

    def set_run_budget(self, run_id: int, budget: int) -> None:
        with self._write():
            self.db.execute("UPDATE runs SET budget = ?, updated_at = ? WHERE id = ?", (budget, _now(), run_id))

    def latest_run_id(self) -> int:
        """The newest run's id (a UserError when there is none)."""
        row = self._one("SELECT MAX(id) AS id FROM runs")
        if row is None or row["id"] is None:
            raise UserError(f"{self.path}: no runs recorded yet (start one with `optiml optimize`).")
        return row["id"]

    def runs(self) -> list[dict]:
        """All runs, newest first, with candidate counts, the seed's and the best time."""
        rows = self._all(
            "SELECT r.id, r.task, r.status, r.budget, r.device, r.created_at, r.updated_at,"
            " (SELECT COUNT(*) FROM nodes n WHERE n.run_id = r.id) AS candidates,"
            " (SELECT COUNT(*) FROM nodes n JOIN evaluations e ON e.node_id = n.id"
            "   WHERE n.run_id = r.id AND n.parent_id IS NOT NULL) AS evaluated,"
            " (SELECT e.median_ms FROM nodes n JOIN evaluations e ON e.node_id = n.id"
            "   WHERE n.run_id = r.id AND n.parent_id IS NULL AND e.status = 'ok'"
            "   ORDER BY n.id LIMIT 1) AS seed_ms,"
            " (SELECT MIN(e.median_ms) FROM nodes n JOIN evaluations e ON e.node_id = n.id"
            "   WHERE n.run_id = r.id AND e.status = 'ok' AND e.median_ms IS NOT NULL) AS best_ms"
            ", r.result_json FROM runs r ORDER BY r.id DESC")
        for r in rows:
            r["best_speedup"] = (r["seed_ms"] / r["best_ms"]) if r["seed_ms"] and r["best_ms"] else None
            final = _loads(r.pop("result_json")) or {}
            r["final_speedup"] = final.get("speedup") if final.get("status") == "ok" else None
        return rows

    # ------------------------------------------------------------------ sources
    def put_source(self, text: str) -> str:
        """Store ``text`` once under its sha256; returns the hash."""
        h = source_hash(text)
        with self._write():
            self.db.execute("INSERT OR IGNORE INTO sources (hash, text) VALUES (?, ?)", (h, text))
        return h

    def source(self, hash_: str) -> str:
        row = self._one("SELECT text FROM sources WHERE hash = ?", (hash_,))
        if row is None:
            raise KeyError(hash_)
        return row["text"]

    # ------------------------------------------------------------------ nodes
    def add_node(self, run_id: int, parent_id: int | None, source: str, *, flags: dict | None = None,
                 edit: str | None = None, rationale: str | None = None,
                 proposer: str | None = None, prior: float | None = None, call: int | None = None,
                 proposal_id: int | None = None) -> int:
        """Record a candidate (status ``pending``) before any work on it starts."""
        h = source_hash(source)
        now = _now()
        with self._write():
            self.db.execute("INSERT OR IGNORE INTO sources (hash, text) VALUES (?, ?)", (h, source))
            depth = 0
            if parent_id is not None:
                parent = self._one("SELECT depth FROM nodes WHERE id = ? AND run_id = ?", (parent_id, run_id))
                if parent is None:
                    raise ValueError(f"node {parent_id} is not in run {run_id}")
                depth = parent["depth"] + 1
            cur = self.db.execute(
                "INSERT INTO nodes (run_id, parent_id, source_hash, flags_json, edit, rationale, proposer,"
                " depth, status, visits, value_sum, created_at, updated_at, prior, call, proposal_id)"
                " VALUES (?,?,?,?,?,?,?,?,'pending',0,0.0,?,?,?,?,?)",
                (run_id, parent_id, h, _dumps(flags), edit, rationale, proposer, depth, now, now,
                 prior, call, proposal_id))
            return cur.lastrowid

    def node_for_source(self, run_id: int, source: str, flags: dict | None = None) -> Node | None:
        """The run's first node with this source (and flags), so duplicate proposals collapse."""
        row = self._one("SELECT * FROM nodes WHERE run_id = ? AND source_hash = ? AND flags_json IS ?"
                        " ORDER BY id LIMIT 1", (run_id, source_hash(source), _dumps(flags)))
        return None if row is None else _node(row)

    def mark_running(self, node_id: int) -> None:
        with self._write():
            cur = self.db.execute(
                "UPDATE nodes SET status = 'running', worker_pid = ?, worker_host = ?, updated_at = ?"
                " WHERE id = ? AND status = 'pending'", (os.getpid(), socket.gethostname(), _now(), node_id))
            if cur.rowcount != 1:
                raise ValueError(f"node {node_id} is not pending")

    def mark_pending(self, node_id: int) -> None:
        """A running node whose evaluation was taken back before it started is pending again."""
        with self._write():
            cur = self.db.execute("UPDATE nodes SET worker_pid = NULL, worker_host = NULL, status = 'pending',"
                                  " updated_at = ? WHERE id = ? AND status = 'running'", (_now(), node_id))
            if cur.rowcount != 1:
                raise ValueError(f"node {node_id} is not running")

    def finish_node(self, node_id: int, evaluation: dict, status: str = "done") -> int:
        """Write the evaluation row and set the node ``done``/``failed`` in one transaction.

        ``evaluation`` has ``status`` (``ok`` or a failure status) and any of build, verify,
        timing, metrics, diagnosis, result (JSON-able; ``result`` is the evaluation as the search
        saw it, for resuming), build_log, median_ms, raw_ncu_csv, reward, reward_version, wall_s.
        Unknown keys are an error.
        """
        if status not in ("done", "failed"):
            raise ValueError(f"finish status must be done or failed, not {status!r}")
        unknown = set(evaluation) - {"status", *_EVAL_JSON, *_EVAL_PLAIN}
        if unknown or "status" not in evaluation:
            raise ValueError(f"bad evaluation keys: unknown {sorted(unknown)}, status required")
        row = {"node_id": node_id, "status": evaluation["status"], "created_at": _now()}
        row.update({f"{k}_json": _dumps(evaluation.get(k)) for k in _EVAL_JSON})
        row.update({k: evaluation.get(k) for k in _EVAL_PLAIN})
        cols = ", ".join(row)
        with self._write():
            cur = self.db.execute(f"INSERT INTO evaluations ({cols}) VALUES ({', '.join('?' * len(row))})",
                                  tuple(row.values()))
            upd = self.db.execute("UPDATE nodes SET status = ?, worker_pid = NULL, updated_at = ?"
                                  " WHERE id = ? AND status IN ('pending', 'running')", (status, _now(), node_id))
            if upd.rowcount != 1:
                raise ValueError(f"node {node_id} is not pending or running")
            return cur.lastrowid

    def amend_evaluation(self, node_id: int, *, status: str, result: dict, reward: float | None,
                         node_status: str) -> None:
        """Replace a finished node's status, result and reward with a later verdict (compute-sanitizer's
        on a best it found ``unsafe``), in one transaction; the rest of its evaluation stays."""
        if node_status not in ("done", "failed"):
            raise ValueError(f"a finished node is done or failed, not {node_status!r}")
        with self._write():
            upd = self.db.execute("UPDATE nodes SET status = ?, updated_at = ? WHERE id = ? AND status IN ('done', 'failed')",
                                  (node_status, _now(), node_id))
            if upd.rowcount != 1:
                raise ValueError(f"node {node_id} is not finished: there is nothing to amend")
            self.db.execute("UPDATE evaluations SET status = ?, result_json = ?, reward = ? WHERE node_id = ?",
                            (status, _dumps(result), reward, node_id))

    def subtree_stats(self, node_id: int) -> tuple[int, float]:
        """A node's visits and value sum as the search has them, derived from the stored rewards
        (every finished node in its subtree, itself included, adds one visit and its reward): right
        for databases written before the store kept its ancestors' figures up to date."""
        row = self.db.execute(
            "WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL SELECT n.id FROM nodes n JOIN sub ON n.parent_id = sub.id) "
            "SELECT COUNT(e.id), COALESCE(SUM(e.reward), 0.0) FROM sub JOIN evaluations e ON e.node_id = sub.id "
            "JOIN nodes n ON n.id = sub.id WHERE n.status IN ('done', 'failed')", (node_id,)).fetchone()
        return int(row[0]), float(row[1])

    def update_stats_many(self, stats) -> None:
        """Several nodes' visits and value sums ``(node id, visits, value_sum)`` in one transaction
        (an evaluation changes its node's and every ancestor's)."""
        now = _now()
        with self._write():
            self.db.conn.executemany("UPDATE nodes SET visits = ?, value_sum = ?, updated_at = ? WHERE id = ?",
                                [(visits, value_sum, now, node_id) for node_id, visits, value_sum in stats])

    def stale_running(self, run_id: int) -> list[Node]:
        """Nodes left ``running`` by a worker that is gone (dead pid here, or another host)."""
        here = socket.gethostname()
        rows = self._all("SELECT * FROM nodes WHERE run_id = ? AND status = 'running' ORDER BY id", (run_id,))
        return [_node(r) for r in rows
                if r["worker_host"] != here or not _pid_alive(r["worker_pid"])]

    def reset_stale(self, run_id: int) -> list[int]:
        """Put stale ``running`` nodes back to ``pending``; returns their ids."""
        ids = [n.id for n in self.stale_running(run_id)]
        if ids:
            with self._write():
                self.db.execute(
                    f"UPDATE nodes SET status = 'pending', worker_pid = NULL, updated_at = ?"
                    f" WHERE status = 'running' AND id IN ({', '.join('?' * len(ids))})", (_now(), *ids))
            logger.info("run {}: {} stale running node(s) back to pending", run_id, len(ids))
        return ids

    def node_times(self, run_id: int) -> list[tuple[int, str]]:
        """(id, created_at) of the run's nodes, oldest first."""
        return [(r["id"], r["created_at"]) for r in
                self._all("SELECT id, created_at FROM nodes WHERE run_id = ? ORDER BY id", (run_id,))]

    def node(self, node_id: int) -> Node:
        row = self._one("SELECT * FROM nodes WHERE id = ?", (node_id,))
        if row is None:
            raise UserError(f"{self.path}: no candidate node {node_id}.")
        return _node(row)

    def nodes(self, run_id: int, status: str | None = None) -> list[Node]:
        if status is not None and status not in NODE_STATUSES:
            raise ValueError(f"unknown node status {status!r}")
        sql = "SELECT * FROM nodes WHERE run_id = ?" + (" AND status = ?" if status else "") + " ORDER BY id"
        return [_node(r) for r in self._all(sql, (run_id, status) if status else (run_id,))]

    def evaluation(self, node_id: int) -> dict | None:
        row = self._one("SELECT * FROM evaluations WHERE node_id = ?", (node_id,))
        if row is None:
            return None
        for k in _EVAL_JSON:
            row[k] = _loads(row.pop(f"{k}_json"))
        return row

    def verified(self, run_id: int) -> list[Ranked]:
        """The run's verified and timed nodes, as :func:`optiml.best.choose_best` ranks them."""
        rows = self._all("SELECT n.*, e.median_ms AS e_median_ms, e.timing_json AS e_timing_json,"
                         " e.result_json AS e_result_json FROM nodes n JOIN evaluations e ON e.node_id = n.id"
                         " WHERE n.run_id = ? AND e.status = ? AND e.median_ms IS NOT NULL ORDER BY n.id",
                         (run_id, OK))
        out = []
        for r in rows:
            result = _loads(r["e_result_json"]) or {}
            if ((result.get("sanitize") or {}).get("status")) == "unsafe":    # a root found unsafe stays ok
                continue
            out.append(Ranked(r["id"], r["e_median_ms"], stored_spread(result, _loads(r["e_timing_json"])),
                              r["depth"], r["id"]))
        return out

    def root_node(self, run_id: int) -> Node | None:
        row = self._one("SELECT * FROM nodes WHERE run_id = ? AND parent_id IS NULL ORDER BY id LIMIT 1", (run_id,))
        return None if row is None else _node(row)

    def path_to(self, node_id: int) -> list[Node]:
        """Nodes from the root to ``node_id``, inclusive."""
        path = [self.node(node_id)]
        while path[-1].parent_id is not None:
            path.append(self.node(path[-1].parent_id))
        return path[::-1]

    def status_counts(self, run_id: int) -> dict[str, int]:
        """Counts by node status and, for finished nodes, by evaluation status (``done:ok``)."""
        counts = {}
        for r in self._all("SELECT n.status AS ns, e.status AS es, COUNT(*) AS c FROM nodes n"
                           " LEFT JOIN evaluations e ON e.node_id = n.id WHERE n.run_id = ?"
                           " GROUP BY ns, es ORDER BY ns, es", (run_id,)):
            counts[r["ns"] if r["es"] is None else f"{r['ns']}:{r['es']}"] = r["c"]
        return counts

    # ------------------------------------------------------------------ proposals
    def record_proposal(self, run_id: int, *, node_id: int | None = None, proposer: str | None = None,
                        model: str | None = None, prompt: str | None = None, raw_answer: str | None = None,
                        parsed_edits: Any = None, tokens_in: int | None = None, tokens_out: int | None = None,
                        latency_s: float | None = None, error: str | None = None,
                        kind: str = "exchange") -> int:
        """A proposer call (``kind`` exchange: prompt, answer, tokens, latency) or a proposal that
        never became a node (``kind`` attempt: ``parsed_edits`` holds its record), stamped with
        the run's newest node id so that a resumed search replays it in order."""
        with self._write():
            seq = self.db.execute("SELECT MAX(id) FROM nodes WHERE run_id = ?", (run_id,)).fetchone()[0]
            cur = self.db.execute(
                "INSERT INTO proposals (run_id, node_id, proposer, model, prompt, raw_answer,"
                " parsed_edits_json, tokens_in, tokens_out, latency_s, error, created_at, kind, seq)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, node_id, proposer, model, prompt, raw_answer, _dumps(parsed_edits), tokens_in,
                 tokens_out, latency_s, error, _now(), kind, seq))
            return cur.lastrowid

    def proposals(self, *, run_id: int | None = None, node_id: int | None = None,
                  proposal_id: int | None = None) -> list[dict]:
        """The proposals of a run, made from a node, or the one with ``proposal_id``, oldest first."""
        where, params = (("id = ?", (proposal_id,)) if proposal_id is not None else
                         ("node_id = ?", (node_id,)) if node_id is not None else ("run_id = ?", (run_id,)))
        rows = self._all(f"SELECT * FROM proposals WHERE {where} ORDER BY id", params)
        for r in rows:
            r["parsed_edits"] = _loads(r.pop("parsed_edits_json"))
        return rows

    def iter_candidates(self, run_id: int) -> Iterator[dict]:
        """One dict per node joined with its evaluation (None fields where not evaluated)."""
        for n in self.nodes(run_id):
            yield {"node": n, "evaluation": self.evaluation(n.id)}


def stored_spread(result: dict | None, timing: dict | None) -> float | None:
    """A candidate's relative timing noise: the search's own figure when stored (schema m002),
    else its timing's IQR over its median, as ``TimingResult.spread`` computes it."""
    if (result or {}).get("spread") is not None:
        return result["spread"]
    timing = timing or {}
    return (timing.get("iqr_ms") or 0.0) / timing["median_ms"] if timing.get("median_ms") else None
