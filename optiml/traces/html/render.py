"""One self-contained HTML page from :func:`report_data`: Jinja2 fills templates/report.html.j2,
and everything the page needs is inlined (Vega, Vega-Lite and vega-embed from vendor/, the page's
own script and style from static/, the data), so it opens offline from a file, a mail attachment
or a CI artifact. Jinja2 is imported here only."""
from __future__ import annotations

import base64
import gzip
import json
from importlib import resources as pkg_resources
from pathlib import Path

from ... import __version__
from ...errors import UserError
from .specs import chart_spec, status_scale, tree_spec

VENDOR = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")


def _asset(*parts: str) -> str:
    return pkg_resources.files(__package__).joinpath(*parts).read_text(encoding="utf-8")


def _script(text: str) -> str:
    """Text safe inside a <script> element."""
    return text.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _json(value) -> str:
    """JSON for a <script type="application/json"> element (no '<', so no '</script>' inside)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def pack(value) -> str:
    """``value`` as gzip-compressed JSON in base64: the per-candidate details (sources, diffs, LLM
    exchanges) repeat themselves from one candidate to the next and shrink about tenfold; the page
    unpacks them with the browser's own DecompressionStream."""
    raw = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def unpack(text: str):
    """The inverse of :func:`pack` (for tests and scripts)."""
    return json.loads(gzip.decompress(base64.b64decode(text)))


def render_report(data: dict) -> str:
    """The page for ``data`` (from :func:`optiml.traces.html.data.report_data`)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader(__package__, "templates"),
                             autoescape=jinja2.select_autoescape(default=True), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["ms"] = lambda v: "-" if v is None else f"{v:.4g} ms"
    env.filters["x"] = lambda v: "-" if v is None else f"{v:.2f}x"
    env.filters["duration"] = _duration
    nodes = data["nodes"]
    statuses = [n["status"] for n in nodes]
    view = {"nodes": nodes, "statuses": dict(zip(*status_scale(statuses))), "base": data["summary"]["base"],
            "chart": chart_spec(data["points"], data["summary"]["base"]),
            "tree": tree_spec(statuses, [n["speedup"] for n in nodes if n["speedup"]], data["summary"]["base"])}
    page = env.get_template("report.html.j2").render(
        s=data["summary"], failures=data["failures"], version=__version__,
        colours=view["statuses"], n_nodes=len(nodes),
        vendor=[_script(_asset("vendor", name)) for name in VENDOR],
        script=_script(_asset("static", "report.js")), style=_asset("static", "report.css"),
        view_json=_json(view), details=pack(data["details"]))
    return page


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def write_report(text: str, path: str | Path) -> Path:
    """Write the page; a path that cannot be written is one sentence."""
    path = Path(path)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot write the report ({e.strerror}).") from None
    return path
