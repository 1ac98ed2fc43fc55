"""The report's two pictures as declarative Vega specs: the speedup over evaluation order
(Vega-Lite) and the search tree (Vega, whose ``tree`` transform lays it out). The page's script
(static/report.js) embeds them with vega-embed, fills the tree's data with the visible nodes (large
sibling groups collapsed) and wires clicks to the candidate panel."""
from __future__ import annotations

from ...status import Status

# one colour per status, by category: build failures orange, wrong answers red, crashes purple,
# optiml's own failures brown/grey, unfinished light grey (Tableau 10 hues)
STATUS_COLOURS = {
    Status.OK: "#54a24b",
    Status.SOURCE_ERROR: "#ffbf79", Status.LAUNCH_CONFIG_ERROR: "#f2a65a", Status.COMPILE_ERROR: "#f58518",
    Status.BUILD_TIMEOUT: "#d67a1d", Status.BUILD_LOST: "#b8651b",
    Status.WRONG_OUTPUT: "#e45756", Status.UNSAFE: "#ff9d98", Status.BEYOND_BOUND: "#b279a2",
    Status.LAUNCH_ERROR: "#d6a5c9", Status.RUNTIME_ERROR: "#b279a2", Status.TIMEOUT: "#7d4f79",
    Status.REFERENCE_ERROR: "#9d755d", Status.HARNESS_ERROR: "#79706e",
    Status.PENDING: "#d8d8d8", Status.RUNNING: "#bab0ac",
}
UNKNOWN_COLOUR = "#4c4c4c"
PATH_COLOUR = "#222222"
# Vega has no star symbol: a five-pointed one as a custom path in the unit square
STAR = ("M0,-1L0.225,-0.309L0.951,-0.309L0.363,0.118L0.588,0.809L0,0.382L-0.588,0.809L-0.363,0.118"
        "L-0.951,-0.309L-0.225,-0.309Z")


def status_scale(statuses) -> tuple[list[str], list[str]]:
    """The statuses present, in the enum's order (unknown ones last), and their colours."""
    order = {str(s): i for i, s in enumerate(Status)}
    present = sorted(set(statuses), key=lambda s: (order.get(s, len(order)), s))
    colours = {str(k): v for k, v in STATUS_COLOURS.items()}
    return present, [colours.get(s, UNKNOWN_COLOUR) for s in present]


def chart_spec(points: list[dict], base: str = "the seed") -> dict:
    """Each evaluated candidate as a point at (evaluation order, speedup over the seed), coloured
    by status (a failure sits at 0), and the best-so-far speedup as a step line."""
    domain, colours = status_scale(p["status"] for p in points)
    x = {"field": "order", "type": "quantitative", "title": "evaluation order (0: the seed)",
         "scale": {"nice": False}, "axis": {"tickMinStep": 1, "format": "d"}}
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "width": "container", "height": 260,
        "data": {"name": "points", "values": points},
        "params": [{"name": "sel", "value": -1}],
        "layer": [
            {"mark": {"type": "line", "interpolate": "step-after", "color": PATH_COLOUR, "strokeWidth": 1.5},
             "transform": [{"filter": "datum.best != null"}],
             "encoding": {"x": x, "y": {"field": "best", "type": "quantitative", "title": f"speedup over {base}"}}},
            {"mark": {"type": "point", "filled": True, "size": 36, "opacity": 0.85, "cursor": "pointer", "aria": True},
             "encoding": {
                 "x": x, "y": {"field": "y", "type": "quantitative"},
                 "color": {"field": "status", "type": "nominal", "title": "status",
                           "scale": {"domain": domain, "range": colours}},
                 "shape": {"condition": {"test": "datum.speedup == null", "value": "cross"}, "value": "circle"},
                 "size": {"condition": {"test": "datum.node === sel", "value": 220}, "value": 36},
                 "stroke": {"condition": {"test": "datum.node === sel", "value": PATH_COLOUR}, "value": None},
                 "tooltip": [{"field": "node", "title": "node"}, {"field": "status"},
                             {"field": "speedup", "format": ".3f", "title": "speedup"},
                             {"field": "edit"}, {"field": "order", "title": "evaluation"}],
                 "description": {"field": "desc"}},
             "transform": [{"calculate": "'point of node ' + datum.node + ': ' + datum.status", "as": "desc"}]},
        ],
        "config": {"legend": {"orient": "right"}},
    }


def tree_spec(statuses, speedups: list[float], base: str = "the seed") -> dict:
    """The search tree laid out left to right (the seed at the left), without its data: the page
    gives data set ``tree`` its visible nodes (``key``, ``parentKey``, ``label``, the light node
    fields; ``more`` on a collapsed group) and sets ``width``/``height``. An ok candidate is a
    circle filled by its speedup over the seed (log scale), a failed one a cross in its status's
    colour; each edge is labelled with the edit that made its child; the path to the best is drawn
    dark and thick, the best as a star."""
    domain, colours = status_scale(statuses)
    failed = [s for s in domain if s != str(Status.OK)]
    lo, hi = (min(speedups), max(speedups)) if speedups else (1.0, 1.0)
    lo, hi = min(lo, 1.0), max(hi, 1.0 + 1e-6)
    return {
        "$schema": "https://vega.github.io/schema/vega/v6.json",
        "width": 800, "height": 400, "padding": {"left": 40, "right": 20, "top": 10, "bottom": 10},
        "signals": [{"name": "selected", "value": -1}],
        "data": [
            {"name": "tree", "values": [],
             "transform": [{"type": "stratify", "key": "key", "parentKey": "parentKey"},
                           {"type": "tree", "method": "tidy", "size": [{"signal": "height"}, {"signal": "width"}],
                            "as": ["y", "x", "level", "children"]}]},
            {"name": "links", "source": "tree",
             "transform": [{"type": "treelinks"}, {"type": "linkpath", "orient": "horizontal", "shape": "diagonal"}]},
        ],
        "scales": [
            {"name": "speed", "type": "log", "domain": [lo, hi], "range": {"scheme": "viridis"}, "zero": False},
            {"name": "status", "type": "ordinal", "domain": domain, "range": colours},
        ],
        "legends": [
            {"fill": "speed", "type": "gradient", "title": f"speedup over {base}", "orient": "top",
             "direction": "horizontal", "gradientLength": 160},
            *([{"stroke": "status", "symbolType": "cross", "title": "failed", "orient": "top", "direction": "horizontal",
                "values": failed, "columns": 4}] if failed else []),
        ],
        "marks": [
            {"type": "path", "from": {"data": "links"}, "interactive": False,
             "encode": {"update": {
                 "path": {"field": "path"},
                 "stroke": {"signal": f"datum.target.path ? '{PATH_COLOUR}' : '#c8c8c8'"},
                 "strokeWidth": {"signal": "datum.target.path ? 2.5 : 1"}}}},
            {"type": "text", "from": {"data": "tree"}, "name": "edges",
             "encode": {"update": {
                 "x": {"signal": "datum.x - 7"}, "y": {"signal": "datum.y - 3"},
                 "text": {"field": "label"}, "align": {"value": "right"}, "baseline": {"value": "bottom"},
                 "fontSize": {"value": 9}, "cursor": {"value": "pointer"},
                 "fill": {"signal": f"datum.path ? '{PATH_COLOUR}' : datum.more ? '#1f5fa8' : '#666'"},
                 "fontWeight": {"signal": "datum.path || datum.more ? 'bold' : 'normal'"}}}},
            {"type": "symbol", "from": {"data": "tree"}, "name": "nodes",
             "encode": {"update": {
                 "x": {"field": "x"}, "y": {"field": "y"}, "cursor": {"value": "pointer"},
                 "shape": {"signal": f"datum.more ? 'diamond' : datum.best ? '{STAR}'"
                                     " : datum.speedup != null ? 'circle' : 'cross'"},
                 "size": {"signal": "datum.key == selected ? 400 : datum.best ? 300 : datum.path ? 110 : 60"},
                 "fill": [{"test": "datum.more", "value": "#ffffff"},
                          {"test": "datum.speedup != null", "scale": "speed", "field": "speedup"},
                          {"scale": "status", "field": "status"}],
                 "stroke": [{"test": "datum.key == selected", "value": "#e45756"},
                            {"test": "datum.path || datum.more", "value": PATH_COLOUR},
                            {"test": "datum.speedup == null", "scale": "status", "field": "status"},
                            {"value": "#ffffff"}],
                 "strokeWidth": {"signal": "datum.key == selected ? 3 : datum.path ? 1.5 : 0.5"},
                 "tooltip": {"signal": "datum.more ? {'collapsed': datum.more + ' more children of node ' + datum.parentKey,"
                                       " 'click': 'to show them'} : {'node': datum.id, 'status': datum.status,"
                                       " 'speedup': datum.speedup == null ? '-' : format(datum.speedup, '.3f') + 'x',"
                                       " 'edit': datum.edit, 'proposer': datum.proposer}"},
                 "description": {"signal": "datum.more ? 'collapsed children of node ' + datum.parentKey"
                                           " : 'node ' + datum.id + ': ' + datum.status"}}}},
        ],
    }
