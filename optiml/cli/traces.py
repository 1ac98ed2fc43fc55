"""``optiml runs | show | best | export | report``: the trace database, read (read-only); ``optiml upgrade``: its schema."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import UserError
from .options import db_option, open_store as _open


@click.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, one per line (JSON Lines), for scripts.")
def runs(db_path: Path, as_json: bool) -> None:
    """List recorded runs: task, status, candidates evaluated, best speedup, when."""
    from ..traces.limits import baseline_ratio, short_baseline, short_limit
    from ..traces.report import format_runs

    with _open(db_path) as store:
        rows = store.runs()
        finals = {r["id"]: store.run(r["id"])["result"] or {} for r in rows}
    for r in rows:      # the best's fraction of speed of light and ratio to the baseline (--json: the figures)
        final = finals[r["id"]]
        if as_json:
            r["speed_of_light"], r["baseline_ratio"] = final.get("speed_of_light"), baseline_ratio(final)
        else:
            r["speed_of_light"], r["vs_baseline"] = short_limit(final), short_baseline(final)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
    else:
        click.echo(format_runs(rows), nl=False)


def _run_id(store, run_id: int | None) -> int:
    """RUN_ID as given, else the newest run, said on standard error."""
    if run_id is not None:
        return run_id
    run_id = store.latest_run_id()
    click.echo(f"run {run_id} ({store.run(run_id)['task']}), the latest; pass RUN_ID for another", err=True)
    return run_id


@click.command()
@click.argument("run_id", type=int, required=False)
@db_option
@click.option("--node", "node_id", type=int, help="Show this candidate against its parent instead of the path.")
@click.option("--raw", is_flag=True, help="With --node: the full record (source, every metric, logs, proposals).")
def show(run_id: int | None, db_path: Path, node_id: int | None, raw: bool) -> None:
    """Show the path from the seed to the best kernel of RUN_ID (default: the latest run):
    rationale, diff, speedup and metric deltas."""
    from ..traces.report import format_node, format_node_raw, format_path

    if raw and node_id is None:
        raise UserError("--raw goes with --node N (the full record of one candidate).")

    with _open(db_path) as store:
        if node_id is not None:
            node = store.node(node_id)
            if run_id is not None and node.run_id != store.run(run_id)["id"]:
                raise UserError(f"--node: node {node_id} is not in run {run_id}.")
            text = (format_node_raw if raw else format_node)(store, node_id)
        else:
            text = format_path(store, _run_id(store, run_id))
    click.echo(text, nl=False)


@click.command()
@click.argument("run_id", type=int, required=False)
@db_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path, allow_dash=True), default=None,
              help="Where to write the best verified kernel, with a header naming the run, node, edits, speedup "
                   "and nvcc flags ('-' for standard output).")
@click.option("--print-flags", is_flag=True, help="Print the nvcc flags the best kernel was verified and timed with.")
def best(run_id: int | None, db_path: Path, output: Path | None, print_flags: bool) -> None:
    """Write the best verified kernel of RUN_ID (default: the latest run) to a file (the one
    `optimize` wrote, when it finished)."""
    from ..app.records import best_of_run
    from ..traces.kernel_file import kernel_file, node_flags

    if output is None and not print_flags:
        raise UserError("give -o FILE (or -o - for standard output) to write the best kernel, or --print-flags.")
    with _open(db_path) as store:
        run_id = _run_id(store, run_id)
        run = store.run(run_id)
        node = best_of_run(store, run_id)
        if node is None:
            raise UserError(f"run {run_id} has no verified candidate yet, so there is no best kernel to write.")
        final = run.get("result") or {}
        mine = final.get("status") == "ok" and (final.get("best_node") == node.id or (
            "best_node" not in final and [n.edit for n in store.path_to(node.id)[1:]] == final.get("best_edits")))
        text = kernel_file(store, run_id, node.id, **({k: final.get(k) for k in ("speedup", "seed_ms", "best_ms")}
                                                      if mine else {}))
        flags = node_flags(store, run, node.id)
        ms = store.evaluation(node.id)["median_ms"]
    if print_flags:
        click.echo(" ".join(flags))
    if output is None:
        return
    if str(output) == "-":
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as e:
        raise UserError(f"{output}: cannot write the kernel ({e.strerror}).") from None
    click.echo(f"{output}: node {node.id}, {ms:.4g} ms, nvcc {' '.join(flags)}", err=print_flags)


@click.command()
@click.argument("run_id", type=int, required=False)
@db_option
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "parquet"]), default=None,
              help="Output format (default: from the file suffix, else csv).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path, allow_dash=True), default=None,
              help="Output file (default: run-RUN_ID.FORMAT; '-' for standard output, csv or json).")
def export(run_id: int | None, db_path: Path, fmt: str | None, output: Path | None) -> None:
    """Export RUN_ID (default: the latest run) as a table, one row per candidate with its metrics as columns."""
    from ..app.records import best_of_run
    from ..traces.export import check_text_format, export_run, export_text, to_dataframe

    to_stdout = output is not None and str(output) == "-"
    if output is not None and not to_stdout and fmt is None:
        fmt = output.suffix.lstrip(".").lower() or "csv"
        if fmt not in ("csv", "json", "parquet"):
            raise UserError(f"{output}: cannot tell the export format from the suffix; pass --format csv|json|parquet.")
    fmt = fmt or "csv"
    if to_stdout:
        check_text_format(fmt)          # parquet to standard output: the error, before any work
    with _open(db_path) as store:
        run_id = _run_id(store, run_id)
        best = best_of_run(store, run_id)
        best_id = best.id if best is not None else None
        if to_stdout:
            text = export_text(to_dataframe(store, run_id, best_id=best_id), fmt)
        else:
            output = output or Path(f"run-{run_id}.{fmt}")
            df = export_run(store, run_id, output, fmt, best_id=best_id)
    if to_stdout:
        click.echo(text, nl=False)
        return
    click.echo(f"{output}: {len(df)} candidates, {len(df.columns)} columns")


@click.command()
@click.argument("run_id", type=int, required=False)
@db_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The HTML file to write (default: run-RUN_ID.html).")
def report(run_id: int | None, db_path: Path, output: Path | None) -> None:
    """Write RUN_ID (default: the latest run) as one self-contained HTML page that opens offline: the
    summary, the speedup over evaluation order, the search tree, and per candidate its diff, resources,
    metrics, messages and LLM exchange; failures by status."""
    from ..app.records import best_of_run
    from ..traces.html import render_report, report_data, write_report

    with _open(db_path) as store:
        run_id = _run_id(store, run_id)
        best = best_of_run(store, run_id)
        data = report_data(store, run_id, best.id if best is not None else None)
    text = render_report(data)
    output = output or Path(f"run-{run_id}.html")
    write_report(text, output)
    click.echo(f"{output}: run {run_id} ({data['summary']['task']}), {len(data['nodes'])} candidates,"
               f" {len(text.encode()) / 1e6:.1f} MB; open it in a browser")


@click.command()
@db_option
def upgrade(db_path: Path) -> None:
    """Bring the trace database's schema up to date (the viewing commands never change it)."""
    from ..traces.store import TraceStore

    with TraceStore(db_path, create=False) as store:
        applied = store.migrated
    click.echo(f"{db_path}: applied {', '.join(applied)}" if applied else f"{db_path}: already up to date")


COMMANDS = (runs, show, best, export, report, upgrade)
