"""`optiml best`'s header gives the run's final interleaved figure only to the kernel that figure
was measured on: for a run stored before the final figure kept its node (no best_node), that is
the node whose edits are the figure's best_edits; when those name no verified node, the kernel
written (the fastest by the search) carries the search's own medians instead."""
from click.testing import CliRunner

from optiml.cli import main
from optiml.traces.store import TraceStore


def _run(tmp_path, final: dict):
    """A run of a seed (2 ms) and two verified edits (1 ms and 1.5 ms), with ``final`` as its result."""
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        run = store.start_run("k", spec_toml="[kernel]\nentry = 'k'\n")
        root = store.add_node(run, None, "__global__ void k() {}\n")
        fast = store.add_node(run, root, "__global__ void k() { }\n", edit="unroll 4")
        slow = store.add_node(run, root, "__global__ void k() {  }\n", edit="pad tile")
        for n, ms in ((root, 2.0), (fast, 1.0), (slow, 1.5)):
            store.finish_node(n, {"status": "ok", "median_ms": ms, "build": {"arch": "sm_90"}})
        store.set_run_result(run, final)
    return path, run, fast, slow


def _header(path, run) -> str:
    r = CliRunner().invoke(main, ["best", str(run), "-o", "-", "--db", str(path)])
    assert r.exit_code == 0, r.output
    return "".join(ln + "\n" for ln in r.output.splitlines() if ln.startswith("//"))


FINAL = {"status": "ok", "speedup": 1.3, "seed_ms": 2.1, "best_ms": 1.6}


def test_an_older_run_s_final_figure_goes_with_the_node_its_edits_name(tmp_path):
    path, run, fast, slow = _run(tmp_path, FINAL | {"best_edits": ["pad tile"]})
    header = _header(path, run)
    assert f"node {slow}" in header and "edits from the seed: pad tile" in header
    assert "1.30x (2.1 ms -> 1.6 ms, timed interleaved with the seed)" in header


def test_a_final_figure_whose_edits_name_no_verified_node_is_not_given_to_the_kernel_written(tmp_path):
    path, run, fast, slow = _run(tmp_path, FINAL | {"best_edits": ["an edit that was never verified"]})
    header = _header(path, run)
    assert f"node {fast}" in header and "edits from the seed: unroll 4" in header
    assert "speedup over the seed: 2.00x (2 ms -> 1 ms, medians of the search)" in header
    assert "1.30x" not in header

