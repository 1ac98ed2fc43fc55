"""A recorded trajectory: the path report, the metric deltas, the pandas export."""
import json

import pandas as pd
import pytest

from optiml.traces.export import export_run, read_export, to_dataframe
from optiml.traces.report import fmt_value, format_node, format_node_raw, format_path, metric_deltas
from optiml.traces.store import TraceStore
from optiml.app.records import best_node, best_of_run

SEED = """__global__ void transpose(float *out, const float *in, int n) {
    __shared__ float tile[32][32];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = in[y * n + x];
    __syncthreads();
    out[x * n + y] = tile[threadIdx.x][threadIdx.y];
}
"""
PADDED = SEED.replace("tile[32][32]", "tile[32][33]")
BOUNDED = PADDED.replace("__global__ void", "__global__ void __launch_bounds__(1024, 2)")
WRONG = SEED.replace("__syncthreads();\n", "")


def make_trajectory(store: TraceStore) -> dict:
    """A seed and three children: padding removes bank conflicts, launch bounds raise occupancy,
    and a faster candidate that fails verification (never the best)."""
    run = store.start_run("transpose", spec_toml="[task]\nname = 'transpose'\n", kernel_source=SEED,
                          config={"search": "mcts"}, seed=3, budget=8, device="NVIDIA H100")
    ids = {}
    ids["seed"] = store.add_node(run, None, SEED, proposer="seed")
    store.mark_running(ids["seed"])
    store.finish_node(ids["seed"], {"status": "ok", "median_ms": 2.0, "metrics": {
        "smem_ld_bank_conflicts": 1.9e9, "achieved_occupancy_pct": 50.0, "dram_throughput_pct": 40.0,
        "registers_per_thread": 32}, "result": {"status": "ok", "median_ms": 2.0, "spread": 0.02,
        "resources": {"registers": 32, "smem_static": 4096, "spill_stores": 0, "spill_loads": 0}}})
    ids["padded"] = store.add_node(run, ids["seed"], PADDED, proposer="llm", edit="pad tile to 33 columns",
                                   rationale="the column read of tile hits one bank 32 ways")
    store.record_proposal(run, node_id=ids["padded"], proposer="llm", model="gpt-test", prompt="make it faster",
                          raw_answer="Pad the tile.", tokens_in=900, tokens_out=40, latency_s=1.2)
    store.finish_node(ids["padded"], {"status": "ok", "median_ms": 1.25, "metrics": {
        "smem_ld_bank_conflicts": 0, "achieved_occupancy_pct": 50.0, "dram_throughput_pct": 64.0,
        "registers_per_thread": 32}, "timing": {"median_ms": 1.25, "iqr_ms": 0.05},
        "result": {"status": "ok", "median_ms": 1.25,
                   "resources": {"registers": 32, "smem_static": 4224, "spill_stores": 0, "spill_loads": 0}}})
    ids["wrong"] = store.add_node(run, ids["seed"], WRONG, proposer="llm", rationale="drop the barrier",
                                  flags={"extra": ["-use_fast_math", "-Xptxas=-O2"]})
    store.finish_node(ids["wrong"], {"status": "wrong_answer", "median_ms": 0.9,
                                     "verify": {"max_abs_err": 3.0}}, status="failed")
    ids["bounded"] = store.add_node(run, ids["padded"], BOUNDED, proposer="rules", edit="__launch_bounds__(1024, 2)",
                                    rationale="two blocks per SM to hide latency")
    store.finish_node(ids["bounded"], {"status": "ok", "median_ms": 1.0, "metrics": {
        "smem_ld_bank_conflicts": 0, "achieved_occupancy_pct": 94.0, "dram_throughput_pct": 80.0,
        "registers_per_thread": 32}, "reward": 0.69, "reward_version": "log-speedup-1",
        "result": {"status": "ok", "median_ms": 1.0, "spread": 0.01,
                   "resources": {"registers": 40, "smem_static": 4224, "spill_stores": 8, "spill_loads": 4}}})
    ids["pending"] = store.add_node(run, ids["bounded"], BOUNDED + "// more\n", proposer="llm")
    ids["run"] = run
    return ids


@pytest.fixture
def traj(tmp_path):
    store = TraceStore(tmp_path / "optiml.db")
    ids = make_trajectory(store)
    yield store, ids
    store.close()


def test_format_values():
    assert fmt_value("smem_ld_bank_conflicts", 1.9e9) == "1.9e9"
    assert fmt_value("smem_ld_bank_conflicts", 0) == "0"
    assert fmt_value("achieved_occupancy_pct", 94.0) == "94%"
    assert fmt_value("x", 0.125) == "0.125"
    assert metric_deltas({"a": 1.0, "b": 5}, {"a": 1.0, "b": 0}) == ["b 5 → 0"]
    assert fmt_value("registers_per_thread", 1) == "1"
    assert fmt_value("achieved_occupancy_pct", 1.0) == "1%"


def test_metric_deltas_keep_a_change_of_five_percent_and_drop_a_smaller_one():
    assert metric_deltas({"a": 100.0, "b": 100.0}, {"a": 95.0, "b": 96.0}) == ["a 100 → 95"]


def test_a_child_of_a_failed_candidate_is_timed_against_the_seed_only(traj):
    store, ids = traj
    child = store.add_node(ids["run"], ids["wrong"], WRONG + "// fixed\n", proposer="llm")
    store.finish_node(child, {"status": "ok", "median_ms": 0.5, "result": {"status": "ok", "median_ms": 0.5}})
    time_line = format_node(store, child).splitlines()[1]
    assert time_line == "time: 0.5 ms; 4.00x vs seed (2 ms)"


def test_format_path_shows_steps_diffs_speedups_and_deltas(traj):
    store, ids = traj
    text = format_path(store, ids["run"])
    assert best_node(store, ids["run"]).id == ids["bounded"]  # the faster wrong answer is not best
    step1, step2 = text.split("step 1:")[1].split("step 2:")
    assert "the column read of tile hits one bank 32 ways" in step1
    assert "-    __shared__ float tile[32][32];" in step1 and "+    __shared__ float tile[32][33];" in step1
    assert "1.60x vs seed (2 ms → 1.25 ms)" in step1
    assert "shared load bank conflicts 1.9e9 → 0" in step1
    assert "achieved occupancy" not in step1  # unchanged in this step
    assert "two blocks per SM" in step2 and "+__global__ void __launch_bounds__(1024, 2)" in step2
    assert "2.00x vs seed" in step2 and "achieved occupancy 50% → 94%" in step2
    assert "drop the barrier" not in text  # not on the path
    assert "\ncandidates: 5 (done:ok 3, failed:wrong_answer 1, pending 1)\nrewrites:\n" in text
    # the rules proposer's account: its own edits only (the LLM's padding is not one of its rewrites)
    assert text.rstrip().endswith("rewrites:\n  launch_bounds: 1 made, 1 verified; best 1.25x over the kernel it rewrote")


def test_show_names_the_seed_the_diff_hunk_and_the_final_figure(traj):
    """A run of `optimize` (its root is the user's seed, not a description): the seed's line, each
    step's diff with two lines of context, and the final interleaved figure against the seed."""
    store, ids = traj
    store.set_run_result(ids["run"], {"status": "ok", "speedup": 2.0, "seed_ms": 2.0, "best_ms": 1.0,
                                      "best_edits": ["pad", "__launch_bounds__(1024, 2)"]})
    lines = format_path(store, ids["run"]).splitlines()
    assert lines[1] == f"seed: node {ids['seed']}, 2 ms"
    assert not any(line.startswith(("root:", "description:", "strategies:")) for line in lines)
    at = lines.index("+++ node 2")
    assert lines[at + 1:at + 6] == [
        "@@ -1,4 +1,4 @@",
        " __global__ void transpose(float *out, const float *in, int n) {",
        "-    __shared__ float tile[32][32];",
        "+    __shared__ float tile[32][33];",
        "     int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;"]
    assert ("final: 2.00x (2 ms → 1 ms) for [pad; __launch_bounds__(1024, 2)], verified again on fresh inputs "
            "and timed interleaved with the seed in one process") in lines


def test_format_path_without_a_verified_candidate(tmp_path):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        n = store.add_node(run, None, "s")
        store.finish_node(n, {"status": "build_failed", "build_log": "error: x"}, status="failed")
        text = format_path(store, run)
        assert "no verified candidate yet" in text and "failed:build_failed 1" in text


def test_format_node_against_its_parent(traj):
    """show --node: status, time and speedups against the parent and the seed, edit and rationale,
    resources and the metrics that changed most against the parent, the sanitize line, the diff;
    no raw JSON and no list of every metric."""
    store, ids = traj
    text = format_node(store, ids["bounded"])
    lines = text.splitlines()
    assert lines[0] == f"node {ids['bounded']} of run {ids['run']}: ok, depth 2, parent node {ids['padded']}, proposer rules"
    assert lines[1] == "time: 1 ms (spread 1.0%); 1.25x vs parent (1.25 ms); 2.00x vs seed (2 ms)"
    assert "edit: __launch_bounds__(1024, 2)" in lines and "why: two blocks per SM to hide latency" in lines
    assert "resources vs parent: registers 32 → 40, spills 0 → 12 bytes, shared memory 4224 bytes" in lines
    head = lines.index("metrics that changed most vs parent (top 12):")
    assert lines[head + 1].split() == ["metric", "parent", "this", "change"]
    assert lines[head + 2].split() == ["achieved", "occupancy", "50%", "94%", "+88%"]       # the largest change first
    assert lines[head + 3].split() == ["DRAM", "throughput", "64%", "80%", "+25%"]
    assert "sanitize: not sanitized" in lines
    assert f"--- diff vs parent node {ids['padded']}" in lines
    assert "+__global__ void __launch_bounds__(1024, 2) transpose(float *out, const float *in, int n) {" in lines
    assert not any(ln.startswith(("build: {", "timing: {", "metrics:")) for ln in lines)
    wrong = format_node(store, ids["wrong"])
    assert "not verified: wrong_answer" in wrong and "verify: max_abs_err 3" in wrong
    assert "flags: -use_fast_math -Xptxas=-O2" in wrong
    store.set_run_result(ids["run"], {})
    seed = format_node(store, ids["seed"])
    assert "the seed" in seed.splitlines()[0] and "--- source" in seed and "vs parent" not in seed


def test_format_node_raw_in_full(traj):
    store, ids = traj
    text = format_node_raw(store, ids["padded"])
    assert "tile[32][33]" in text and "evaluation: ok" in text
    assert "smem_ld_bank_conflicts = 0" in text and "Pad the tile." in text and "gpt-test" in text


def test_dataframe_one_row_per_candidate_with_metric_columns(traj):
    store, ids = traj
    df = to_dataframe(store, ids["run"])
    assert list(df["node_id"]) == [ids[k] for k in ("seed", "padded", "wrong", "bounded", "pending")]
    row = df.set_index("node_id").loc[ids["bounded"]]
    assert row["achieved_occupancy_pct"] == 94.0 and row["smem_ld_bank_conflicts"] == 0
    assert row["speedup"] == pytest.approx(2.0) and row["eval_status"] == "ok"
    wrong = df.set_index("node_id").loc[ids["wrong"]]
    assert pd.isna(wrong["speedup"]) and pd.isna(wrong["achieved_occupancy_pct"])


def test_export_columns_edit_flags_spread_resources_time_and_best(traj):
    """The export carries what a reader of the run compares: the edit, the extra nvcc flags, the
    timing's spread, ptxas's registers and spills, when the candidate was made, and which node
    `optiml best` writes (the search's best; the final figure's node once the run has one)."""
    store, ids = traj
    df = to_dataframe(store, ids["run"], best_of_run(store, ids["run"]).id).set_index("node_id")
    for col in ("edit", "flags", "spread", "registers", "spill_bytes", "created_at", "is_best"):
        assert col in df.columns, col
    assert df.loc[ids["padded"], "edit"] == "pad tile to 33 columns" and pd.isna(df.loc[ids["seed"], "edit"])
    assert df.loc[ids["wrong"], "flags"] == "-use_fast_math -Xptxas=-O2" and pd.isna(df.loc[ids["seed"], "flags"])
    assert df.loc[ids["bounded"], "spread"] == pytest.approx(0.01)
    assert df.loc[ids["padded"], "spread"] == pytest.approx(0.04)          # IQR / median of its timing
    assert (df.loc[ids["seed"], "registers"], df.loc[ids["bounded"], "registers"]) == (32, 40)
    assert (df.loc[ids["seed"], "spill_bytes"], df.loc[ids["bounded"], "spill_bytes"]) == (0, 12)
    assert pd.isna(df.loc[ids["pending"], "registers"])
    assert df["created_at"].str.match(r"\d{4}-\d\d-\d\dT").all()
    assert df.index[df["is_best"]].tolist() == [ids["bounded"]]
    store.set_run_result(ids["run"], {"status": "ok", "speedup": 1.6, "seed_ms": 2.0, "best_ms": 1.25,
                                      "best_node": ids["padded"]})
    df = to_dataframe(store, ids["run"], best_of_run(store, ids["run"]).id)
    assert df.loc[df["is_best"], "node_id"].tolist() == [ids["padded"]]


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_round_trips_through_pandas(traj, tmp_path, fmt):
    store, ids = traj
    path = tmp_path / f"run.{fmt}"
    df = export_run(store, ids["run"], path)
    back = read_export(path)
    pd.testing.assert_frame_equal(back, df)
    plain = pd.read_csv(path) if fmt == "csv" else pd.DataFrame(json.loads(path.read_text()))
    assert list(plain.columns) == list(df.columns) and len(plain) == 5
    assert plain["median_ms"].tolist()[:4] == [2.0, 1.25, 0.9, 1.0]


@pytest.mark.parametrize("verdict, line", [
    ({"status": "clean", "tools": ["memcheck", "racecheck", "initcheck", "synccheck"], "message": ""},
     "sanitize: passed memcheck, racecheck, initcheck, synccheck"),
    ({"status": "unsafe", "tools": [], "message": "memcheck: Invalid __global__ write of size 4 bytes"},
     "sanitize: UNSAFE: memcheck: Invalid __global__ write of size 4 bytes"),
    (None, "sanitize: not sanitized"),
])
def test_show_says_which_checks_the_written_kernel_passed(traj, verdict, line):
    store, ids = traj
    store.set_run_result(ids["run"], {"status": "ok", "speedup": 2.0, "seed_ms": 2.0, "best_ms": 1.0,
                                      "best_edits": ["pad"], "sanitize": verdict})
    assert line in format_path(store, ids["run"]).splitlines()


def test_the_rules_rewrites_are_named_back_from_their_edits():
    """`optiml show` counts candidates by the rewrite that made them, read from the edit: each
    structural rewrite's real edit on a kernel it takes maps back to its kind."""
    from pathlib import Path

    from optiml.edits.transforms import all_transforms
    from optiml.traces.report import rewrite_of
    here = Path(__file__).resolve().parents[1] / "bench" / "templates" / "rewrites"
    hist = ("__global__ void h(const unsigned int *k, unsigned int *c, int n, int b) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) atomicAdd(&c[k[i] % b], 1u);\n}\n")
    seen = set()
    for src, entry, launch in ((hist, "h", (("cdiv(n, 128)",), (128,), 0)),
                               ((here / "block_partial.cu").read_text(), "block_partial", (("cdiv(n, 256)",), (256,), 0)),
                               ((here / "block_sum.cu").read_text(), "block_sum", (("cdiv(n, 256)",), (256,), 0))):
        for t in all_transforms(src, entry, launch=launch):
            assert rewrite_of(t.edit) == t.kind, (t.kind, t.edit)
            seen.add(t.kind)
    assert {"privatize", "partials", "accumulate"} <= seen


def test_a_nodes_proposer_call_shows_its_error_only_when_it_had_one(traj):
    store, ids = traj
    ok = store.record_proposal(ids["run"], proposer="llm", model="gpt-test", raw_answer="Pad the tile.",
                               tokens_in=900, tokens_out=40, latency_s=1.2)
    failed = store.record_proposal(ids["run"], proposer="llm", model="gpt-test", raw_answer="",
                                   error="the server answered 503", latency_s=0.5)
    shown = []
    for proposal in (ok, failed):
        node = store.add_node(ids["run"], ids["seed"], SEED + f"// {proposal}\n", proposer="llm", proposal_id=proposal)
        shown.append(format_node(store, node).split("--- the proposer call behind it")[1].splitlines())
    assert shown[0][1:] == ["Pad the tile."]
    assert shown[1][1:] == ["error: the server answered 503"]


def test_the_runs_table_starts_each_run_at_its_second():
    from optiml.traces.report import format_runs

    text = format_runs([{"id": 1, "task": "scale", "status": "done", "evaluated": 3, "budget": 8,
                         "created_at": "2026-11-29T10:26:25.146+00:00"}])
    assert text.splitlines()[1].split() == ["1", "scale", "done", "3/8", "-", "-", "-", "2026-11-29", "10:26:25"]


def test_the_raw_node_lists_what_was_tried_from_it_without_a_new_candidate(tmp_path):
    """A proposal from a node that made no candidate (a rewrite refused) is listed under its own
    heading with its edit, status and reason; a proposer call made from the node is not among them."""
    with TraceStore(tmp_path / "t.db") as store:
        ids = make_trajectory(store)
        store.record_proposal(ids["run"], node_id=ids["padded"], proposer="rules",
                              parsed_edits={"edit": "unroll the copy loop by 4", "status": "refused"},
                              error="refused: no loop with a constant trip count", kind="attempt")
        store.record_proposal(ids["run"], node_id=ids["padded"], proposer="llm", model="gpt-test",
                              prompt="again", raw_answer="Use launch bounds.")
        text = format_node_raw(store, ids["padded"])
        tried = text.split("--- tried from this node without a new candidate:\n", 1)[1]
        assert tried.splitlines() == ["  unroll the copy loop by 4: refused: refused: no loop with a constant trip count"]
        assert "Use launch bounds." in text.split("--- tried from this node")[0]
        assert "without a new candidate" not in format_node_raw(store, ids["bounded"])


def test_export_errors_are_one_sentence_and_a_metric_named_like_a_column_keeps_both(traj, tmp_path, monkeypatch):
    """An unknown format, a folder that is not there, and parquet without pyarrow (FAKE: to_parquet
    raising ImportError) each say what to do; a metric whose name is a column's is kept as metric_NAME."""
    from optiml.errors import UserError
    from optiml.traces.export import check_text_format

    store, ids = traj
    with pytest.raises(UserError) as e:
        export_run(store, ids["run"], tmp_path / "run.xlsx")
    assert str(e.value) == "--format: unknown export format 'xlsx' (use one of csv, json, parquet)."
    with pytest.raises(UserError) as e:
        check_text_format("xml")
    assert str(e.value) == "--format: unknown export format 'xml' (use one of csv, json, parquet)."
    with pytest.raises(UserError) as e:
        export_run(store, ids["run"], tmp_path / "gone" / "run.csv")
    assert str(e.value) == (f"{tmp_path / 'gone' / 'run.csv'}: cannot write the export (Cannot save file into a "
                            f"non-existent directory: '{tmp_path / 'gone'}').")

    def no_pyarrow(self, *a, **kw):
        raise ImportError("Unable to find a usable engine")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", no_pyarrow)
    with pytest.raises(UserError) as e:
        export_run(store, ids["run"], tmp_path / "run.parquet")
    assert str(e.value) == "--format parquet needs pyarrow: pip install pyarrow."
    store.finish_node(ids["pending"], {"status": "ok", "median_ms": 0.8, "metrics": {"median_ms": 0.7, "spread": 3.0}})
    df = to_dataframe(store, ids["run"]).set_index("node_id")
    assert df.loc[ids["pending"], "median_ms"] == 0.8 and df.loc[ids["pending"], "metric_median_ms"] == 0.7
    assert df.loc[ids["pending"], "metric_spread"] == 3.0


def test_the_path_says_a_flag_step_a_failed_final_timing_and_an_unevaluated_node(traj):
    """`optiml show`: a step that changed nvcc flags says both sets; a final re-timing that failed is
    said with its status; --node --raw of a candidate not evaluated yet says so, and a candidate
    made by a proposer call shows that call; `optiml runs` of an empty database says so."""
    from optiml.traces.report import format_runs

    store, ids = traj
    run = ids["run"]
    call = store.record_proposal(run, proposer="llm", model="gpt-test", prompt="faster", raw_answer="Use fast math.",
                                 tokens_in=12, tokens_out=5, latency_s=0.5)
    fast = store.add_node(run, ids["bounded"], BOUNDED, proposer="llm", edit="fast math",
                          flags={"extra": ["-use_fast_math"]}, proposal_id=call)
    store.finish_node(fast, {"status": "ok", "median_ms": 0.5, "result": {"status": "ok", "median_ms": 0.5}})
    store.set_run_result(run, {"status": "runtime_error", "message": "the final job faulted"})
    text = format_path(store, run)
    assert f"node {ids['bounded']} → node {fast}" in text
    assert "  flags: {} → {'extra': ['-use_fast_math']}" in text and "  (same source)" in text
    assert "final re-timing failed: runtime_error: the final job faulted" in text
    raw = format_node_raw(store, ids["pending"])
    assert "evaluation: none yet" in raw and "--- source " in raw
    made = format_node_raw(store, fast)
    assert f"--- the proposer call behind it: proposal {call} from llm / gpt-test: 12 in, 5 out tokens" in made
    assert "Use fast math." in made
    assert format_runs([]) == "no runs recorded\n"
