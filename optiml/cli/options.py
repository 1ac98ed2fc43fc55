"""Options and helpers the commands share, each declared once."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..traces import DB_ENV, DEFAULT_DB

EXIT_CANDIDATE_FAILED = 3

spec_option = click.option("--spec", "spec_path", type=click.Path(path_type=Path),
                           help="Task spec (default: kernel.toml beside the kernel).")
arch_option = click.option("--arch", help="GPU architecture, e.g. sm_90 (default: the GPU's).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), envvar=DB_ENV,
                         default=DEFAULT_DB, show_default=True, help=f"Trace database (also ${DB_ENV}).")


def timeout_option(default: float, what: str):
    return click.option("--timeout", type=float, default=default, show_default=True, callback=positive_timeout,
                        help=f"Seconds before {what}.")


def positive_timeout(ctx, param, value):
    """``--timeout`` must be a positive number of seconds (a UserError: one sentence, exit 1)."""
    if value is not None and not value > 0:
        from ..errors import UserError

        raise UserError(f"--timeout must be a positive number of seconds, not {value:g}.")
    return value


def open_store(db_path: Path):
    """The trace database for viewing: it must exist, and it is opened read-only (never written
    nor migrated; an older schema is an error naming `optiml upgrade`)."""
    from ..traces.store import TraceStore

    return TraceStore(db_path, read_only=True)


class SearchProgress:
    """What a search shows on stderr, for ``optimize`` and ``generate`` alike: a line per finished
    candidate at -v and whenever stderr is not a terminal (CI logs, nohup), the bar only on a
    terminal, and nothing of either with -q. ``over``: what the bar's speedup is over, if not the seed."""

    def __init__(self, over: str = ""):
        said = (click.get_current_context().obj or {}) if click.get_current_context(silent=True) else {}
        self.quiet, verbose = bool(said.get("quiet")), int(said.get("verbose") or 0)
        self.lines = not self.quiet and (verbose > 0 or not sys.stderr.isatty())
        self.show_bar = not self.quiet and not self.lines
        self.over = f" over {over}" if over else ""
        self.bar = None

    def on_candidate(self, f) -> None:
        if self.lines:
            click.echo(f.line(), err=True)

    def on_progress(self, done: int, total: int, speedup: float | None) -> None:
        if not self.show_bar:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="optimizing", show_pos=True, file=sys.stderr)
            self.bar.__enter__()
        self.bar.label = "optimizing" + (f" (best {speedup:.2f}x{self.over})" if speedup else "")
        self.bar.update(done - self.bar.pos)

    def on_search_end(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None

