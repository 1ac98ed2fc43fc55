"""The report's two pictures (optiml/traces/html/specs.py, fed by report_data): each chart point's
tooltip names the edit that made it, and what the page's script relies on (nothing selected when the page
opens, the selected point drawn larger)."""
from optiml.traces.html import report_data
from optiml.traces.html.specs import chart_spec, tree_spec
from optiml.traces.store import TraceStore
from tests.test_traces_report import make_trajectory

POINTS = [{"order": 0, "node": 1, "status": "ok", "speedup": 1.0, "y": 1.0, "best": 1.0, "edit": "seed"},
          {"order": 1, "node": 2, "status": "compile_error", "speedup": None, "y": 0.0, "best": 1.0, "edit": "x"}]


def test_a_chart_point_is_labelled_with_the_edit_that_made_its_candidate(tmp_path):
    """The seed's point reads "seed"; a child's point reads its own edit (the tree's label for it)."""
    with TraceStore(tmp_path / "t.db") as store:
        ids = make_trajectory(store)
        data = report_data(store, ids["run"])
    edits = {p["node"]: p["edit"] for p in data["points"]}
    assert edits[ids["seed"]] == "seed"
    assert edits[ids["padded"]] == "pad tile to 33 columns"
    assert edits[ids["bounded"]] == "__launch_bounds__(1024, 2)"
    light = {n["id"]: n["edit"] for n in data["nodes"]}
    assert all(edits[i] == light[i] for i in edits)      # a point and its tree node say the same
    unnamed = [n["id"] for n in data["nodes"] if n["parent"] is not None and n["edit"] == ""]
    assert all(edits[i] == "" for i in unnamed if i in edits)   # a child with no recorded edit is not "seed"


def test_nothing_is_selected_when_the_page_opens():
    """The chart's ``sel`` parameter starts at -1, the same no-node value as the tree's ``selected``
    signal, so no point is drawn as selected before a click."""
    chart = chart_spec(POINTS)
    tree = tree_spec(["ok", "compile_error"], [1.0])
    assert chart["params"] == [{"name": "sel", "value": -1}]
    assert tree["signals"][0] == {"name": "selected", "value": -1}
    assert all(p["node"] != -1 for p in POINTS)


def test_the_selected_point_is_drawn_larger_than_the_others():
    """An unselected point is drawn at the mark's own size; the selected one (``datum.node === sel``)
    several times larger, and outlined."""
    [_, points] = chart_spec(POINTS)["layer"]
    enc = points["encoding"]
    assert enc["size"]["condition"]["test"] == "datum.node === sel"
    assert enc["size"]["value"] == points["mark"]["size"]
    assert enc["size"]["condition"]["value"] >= 4 * enc["size"]["value"]
    assert enc["stroke"]["condition"]["test"] == "datum.node === sel"


def test_the_trees_legend_of_crosses_lists_the_failed_statuses_only():
    legends = tree_spec(["ok", "wrong_output", "compile_error"], [1.0, 2.0])["legends"]
    assert [lg["values"] for lg in legends if lg.get("title") == "failed"] == [["compile_error", "wrong_output"]]
    assert [lg for lg in tree_spec(["ok"], [1.0])["legends"] if lg.get("title") == "failed"] == []
