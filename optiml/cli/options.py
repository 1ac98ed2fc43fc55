"""Options and helpers the commands share, each declared once."""
from __future__ import annotations

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
