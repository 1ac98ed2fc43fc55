"""``optiml report``: one self-contained HTML page per stored run.

:func:`report_data` gathers what the page shows from the trace store alone; :func:`render_report`
turns it into the page (Jinja2, with Vega-Lite and Vega inlined: no network needed to view it)."""
from __future__ import annotations

from .data import report_data
from .render import pack, render_report, unpack, write_report


def html_report(store, run_id: int, best_id: int | None = None) -> str:
    """The report page of run ``run_id`` (``best_id``: see :func:`report_data`)."""
    return render_report(report_data(store, run_id, best_id))


__all__ = ["html_report", "pack", "render_report", "report_data", "unpack", "write_report"]
