"""A run as a table: one row per candidate, its metrics as columns (pandas imported here only)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from .limits import baseline_ratio
from .store import TraceStore, stored_spread

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("csv", "json", "parquet")

_NODE_COLS = ("node_id", "parent_id", "depth", "node_status", "proposer", "edit", "rationale", "flags",
              "source_hash", "created_at")
_EVAL_COLS = ("eval_status", "median_ms", "spread", "speedup", "is_best", "registers", "spill_bytes",
              "reward", "reward_version", "wall_s")
# the run's final figure, on the best's row only: fraction of speed of light, which bound, which peaks
# (measured or datasheet), and the baseline's median over the best's
_LIMIT_COLS = ("sol_fraction", "sol_bound", "sol_peaks", "baseline_ratio")
_TEXT_COLS = ("eval_status", "reward_version", "sol_bound", "sol_peaks")


def resources(e: dict) -> dict:
    """ptxas's figures for the entry (registers, smem_static, spill_stores, spill_loads...): the
    search's result's, else the build's when it names one kernel."""
    res = (e.get("result") or {}).get("resources") or {}
    if not res:
        by_symbol = (e.get("build") or {}).get("resources") or {}
        res = next(iter(by_symbol.values())) if len(by_symbol) == 1 else {}
    return res if isinstance(res, dict) else {}


def to_dataframe(store: TraceStore, run_id: int, best_id: int | None = None) -> "pd.DataFrame":
    """One row per candidate node of ``run_id``: node fields (``flags``: the extra nvcc flags,
    space-separated), evaluation fields (``spread``: timing IQR over median; ``registers`` and
    ``spill_bytes`` from ptxas), the speedup over the seed, ``is_best`` (node ``best_id``: the one
    ``optiml best`` writes), on the best's row the run's final figures (``sol_fraction``,
    ``sol_bound``, ``sol_peaks``: measured or datasheet, ``baseline_ratio``) and one column per
    metric (``NaN`` where a candidate has no value)."""
    import pandas as pd

    final = store.run(run_id)["result"] or {}  # a clear error for an unknown run
    sol = final.get("speed_of_light") or {}
    limits = {"sol_fraction": sol.get("fraction"), "sol_bound": sol.get("bound"), "sol_peaks": sol.get("source"),
              "baseline_ratio": baseline_ratio(final)}
    root = store.root_node(run_id)
    root_eval = store.evaluation(root.id) if root else None
    seed_ms = root_eval["median_ms"] if root_eval and root_eval["status"] == "ok" else None
    created = dict(store.node_times(run_id))
    rows, metric_names = [], []
    for c in store.iter_candidates(run_id):
        n, e = c["node"], c["evaluation"] or {}
        ms = e.get("median_ms") if e.get("status") == "ok" else None
        res = resources(e)
        spills = [res[k] for k in ("spill_stores", "spill_loads") if isinstance(res.get(k), (int, float))]
        row = {"node_id": n.id, "parent_id": n.parent_id, "depth": n.depth, "node_status": n.status,
               "proposer": n.proposer, "edit": n.edit, "rationale": n.rationale,
               "flags": " ".join((n.flags or {}).get("extra") or ()) or None, "source_hash": n.source_hash,
               "created_at": created.get(n.id),
               "eval_status": e.get("status"), "median_ms": e.get("median_ms"),
               "spread": stored_spread(e.get("result"), e.get("timing")) if e else None,
               "speedup": (seed_ms / ms) if seed_ms and ms else None, "is_best": n.id == best_id,
               "registers": res.get("registers"), "spill_bytes": sum(spills) if spills else None,
               "reward": e.get("reward"), "reward_version": e.get("reward_version"), "wall_s": e.get("wall_s")}
        row |= limits if n.id == best_id else dict.fromkeys(_LIMIT_COLS)
        for k, v in (e.get("metrics") or {}).items():
            if k in row:
                k = f"metric_{k}"
            if k not in metric_names:
                metric_names.append(k)
            row[k] = v
        rows.append(row)
    columns = [*_NODE_COLS, *_EVAL_COLS, *_LIMIT_COLS, *metric_names]
    df = pd.DataFrame(rows, columns=columns)
    return _types(df)


def _types(df: "pd.DataFrame") -> "pd.DataFrame":
    """Nullable ints for ids, floats for numbers, nullable strings for text: the same types
    whether the frame comes from the store or back from a csv or json file."""
    import pandas as pd

    for col in df.columns:
        if col in ("parent_id", "node_id", "depth", "registers"):
            df[col] = df[col].astype("Int64")
        elif col == "is_best":
            df[col] = df[col].map(lambda v: v if isinstance(v, bool) else str(v).lower() == "true").astype("bool")
        elif col in _NODE_COLS or col in _TEXT_COLS:
            df[col] = df[col].astype("string")
        else:
            try:
                df[col] = pd.to_numeric(df[col]).astype("float64")
            except (ValueError, TypeError):
                df[col] = df[col].astype("string")
    return df


def export_run(store: TraceStore, run_id: int, path: str | Path, fmt: str | None = None,
               best_id: int | None = None) -> "pd.DataFrame":
    """Write ``to_dataframe`` to ``path`` as csv, json (records) or parquet; returns the frame."""
    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown export format {fmt!r} (use one of {', '.join(FORMATS)}).")
    df = to_dataframe(store, run_id, best_id)
    try:
        if fmt == "csv":
            df.to_csv(path, index=False)
        elif fmt == "json":
            df.to_json(path, orient="records", indent=1)
        else:
            try:
                df.to_parquet(path, index=False)
            except ImportError:
                raise UserError("--format parquet needs pyarrow: pip install pyarrow.") from None
    except OSError as e:
        raise UserError(f"{path}: cannot write the export ({e.strerror or e}).") from None
    return df


def check_text_format(fmt: str) -> None:
    """UserError unless ``fmt`` can go to standard output (csv or json; parquet is binary)."""
    if fmt == "parquet":
        raise UserError("-o -: parquet is binary and cannot go to standard output; give a file name or --format csv|json.")
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown export format {fmt!r} (use one of {', '.join(FORMATS)}).")


def export_text(df: "pd.DataFrame", fmt: str) -> str:
    """``df`` as csv or json (records) text, for standard output (see :func:`check_text_format`)."""
    check_text_format(fmt)
    return df.to_csv(index=False) if fmt == "csv" else df.to_json(orient="records", indent=1) + "\n"


def read_export(path: str | Path, fmt: str | None = None) -> "pd.DataFrame":
    """Read back what ``export_run`` wrote, with the same column types."""
    import pandas as pd

    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt == "csv":
        df = pd.read_csv(path)
    elif fmt == "json":
        df = pd.read_json(path, orient="records", dtype=False)
    else:
        df = pd.read_parquet(path)
    return _types(df)
