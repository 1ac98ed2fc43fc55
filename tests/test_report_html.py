"""`optiml report`: one self-contained HTML page per run, from the recorded databases and a
synthetic run of 1000 candidates (fake proposer and evaluator: tests/synthetic_run.py). What the
page draws in a browser is checked in tests/test_report_browser.py; here, what the file holds."""
import json
import re
import shutil

import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.traces.html import html_report, report_data, unpack
from optiml.traces.store import TraceStore
from tests.chat_server import Reply, chat_server  # noqa: F401  (the fixture)
from tests.conftest import DATA, assert_one_sentence_error
from tests.synthetic_run import make_synthetic_run
from tests.test_traces_report import make_trajectory

H100 = DATA / "traces" / "h100_tiled_killed_resumed.db"
PAD_B = "+    __shared__ float Bs[TILE][TILE + 1];"
EXTERNAL = re.compile(r"""(?:\bsrc|\bhref|@import|url\()\s*=?\s*["']?\s*(?:https?:)?//""", re.I)


def h200_copy(tmp_path):
    """tests/data/traces/recorded_h200_runs.db (schema m001), upgraded: viewing never migrates."""
    dst = tmp_path / "h200.db"
    shutil.copy(DATA / "traces" / "recorded_h200_runs.db", dst)
    assert CliRunner().invoke(main, ["upgrade", "--db", str(dst)]).exit_code == 0
    return dst


@pytest.fixture(scope="session")
def synthetic_db(tmp_path_factory):
    """The 1000-candidate synthetic run, made once per session (tests/test_report_browser.py too)."""
    return synthetic(tmp_path_factory)


def synthetic(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "synthetic_1000.db"
    if not path.exists():
        make_synthetic_run(path)
    return path


def page_parts(html: str) -> tuple[dict, dict]:
    """The page's light data (tree and chart) and its unpacked per-candidate details."""
    view = json.loads(re.search(r'<script type="application/json" id="report-view">(.*?)</script>', html, re.S).group(1))
    details = unpack(re.search(r'<script type="text/plain" id="report-details">(.*?)</script>', html, re.S).group(1).strip())
    return view, details


def write(db, run, out, *extra):
    r = CliRunner().invoke(main, ["report", *([str(run)] if run else []), "--db", str(db), "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out.read_text()


def assert_self_contained(html: str):
    assert not EXTERNAL.search(html), EXTERNAL.search(html).group(0)
    assert "<script src" not in html and "<link" not in html
    assert html.count("vegaEmbed") >= 2 and "DecompressionStream" in html      # the libraries are inlined


def test_report_of_the_recorded_h100_run(tmp_path):
    """The largest recorded run: 31 candidates, the final interleaved 5.25x, all ok."""
    html = write(H100, None, tmp_path / "r.html")          # RUN defaults to the latest
    assert_self_contained(html)
    for figure in ("sgemm_tiled_conflicts", "5.25x", "79.49 ms &rarr; 15.14 ms", "80.06 ms &rarr; 15.13 ms",
                   "NVIDIA H100 80GB HBM3", "ok 31", "rules 30", "4.7 min", "duplicate 13",
                   "<code>pad Bs[TILE][TILE] -&gt; Bs[TILE][TILE + 1]</code> &rarr; <code>flag -use_fast_math</code>"):
        assert figure in html, figure
    view, details = page_parts(html)
    with TraceStore(H100, read_only=True) as store:
        ids = [n.id for n in store.nodes(1)]
    assert [n["id"] for n in view["nodes"]] == ids and sorted(map(int, details["nodes"])) == ids
    assert [p["node"] for p in view["chart"]["data"]["values"]] and len(view["chart"]["data"]["values"]) == 31
    best = [n for n in view["nodes"] if n["best"]]
    # the best is the node the final figure names (app.records.best_of_run), not the search's pick (node 2)
    assert [n["id"] for n in best] == [16] and [n["id"] for n in view["nodes"] if n["path"]] == [1, 2, 16]
    two = details["nodes"]["2"]
    assert PAD_B in two["diff"] and "-    __shared__ float Bs[TILE][TILE];" in two["diff"]
    assert any("shared load bank conflicts" in row for row in two["metrics"])       # show --node's table
    assert ["registers", 32, 32] in two["resources"] and two["diagnosis"]
    assert details["sources"][two["source"]].count("Bs[TILE][TILE + 1]") >= 1
    assert "diff" not in details["nodes"]["1"] and details["nodes"]["1"]["metrics"]     # the seed: its source, all metrics


def test_report_of_a_recorded_generate_run_is_over_the_slowest_strategy(tmp_path):
    """An H100 run of optiml generate (scripted server, bench/generate/scripted_generate.sh): its root
    is the description, not a kernel, so speedups are over the slowest verified strategy (node 2), as
    its final figure is timed."""
    db = tmp_path / "g.db"
    shutil.copy(DATA / "traces" / "h100_generate_softmax_rows.db", db)
    html = write(db, 1, tmp_path / "g.html")
    assert "9.97x" in html and "timed interleaved with the slowest verified strategy" in html
    view, details = page_parts(html)
    assert view["base"] == "the slowest verified strategy"
    nodes = {n["id"]: n for n in view["nodes"]}
    assert nodes[2]["speedup"] == pytest.approx(1.0) and nodes[7]["speedup"] > 9
    assert view["chart"]["layer"][0]["encoding"]["y"]["title"] == "speedup over the slowest verified strategy"


def test_report_of_each_recorded_h200_run(tmp_path):
    db = h200_copy(tmp_path)
    with TraceStore(db, read_only=True) as store:
        runs = {r["id"]: r for r in store.runs()}
        nodes = {run: [n.id for n in store.nodes(run)] for run in runs}
    expected = {1: ("sgemm_tiled_conflicts", "5.16x", "shared load bank conflicts"), 2: ("sgemm_naive", "1.13x", None)}
    for run, (task, speedup, metric) in expected.items():
        html = write(db, run, tmp_path / f"run{run}.html")
        assert_self_contained(html)
        assert task in html and speedup in html and "no final interleaved timing stored" in html
        view, details = page_parts(html)
        assert [n["id"] for n in view["nodes"]] == nodes[run]
        assert sorted(map(int, details["nodes"])) == nodes[run]
        if metric:
            assert any(metric in row for d in details["nodes"].values() for row in d["metrics"])


def test_the_1000_candidate_report_holds_every_node_in_a_page_of_modest_size(tmp_path, synthetic_db):
    html = write(synthetic_db, 1, tmp_path / "big.html")
    assert_self_contained(html)
    view, details = page_parts(html)
    with TraceStore(synthetic_db, read_only=True) as store:
        nodes = store.nodes(1)
        exchanges = [p for p in store.proposals(run_id=1) if p["kind"] == "exchange"]
        counts = store.status_counts(1)
    assert len(nodes) >= 1000 and [n["id"] for n in view["nodes"]] == [n.id for n in nodes]
    assert len(details["nodes"]) == len(nodes)
    assert len(html.encode()) < 2.5e6, len(html.encode())              # 1.5 MB when this was written
    # the summary: the final figure with its interval, speed of light and the baseline, statuses
    assert re.search(r"<strong>\d+\.\d\dx</strong> <span class=\"muted\">\(95 % \d\.\d\d&ndash;\d\.\d\dx over 10 rounds\)", html)
    assert "42 % of the bound" in html and "42.0% of speed of light (memory-bound: DRAM copy bandwidth 3000 GB/s" in html
    assert "<dd>2.00x</dd><dd class=\"muted\">2.00x over the baseline fake_baseline" in html and "fake-scripted-model" in html
    assert f"compile_error {counts['failed:compile_error']}" in html
    # failures grouped by status with their first messages, each naming its nodes
    failures = html[html.index('<section id="failures">'):]
    assert failures.index('data-status="compile_error"') < failures.index('data-status="timeout"')
    assert "identifier &#34;KNOB_" in failures and "an illegal memory access was encountered" in failures
    # LLM-like exchanges: the prompt and the answer reach the node they made
    llm = [d for d in details["nodes"].values() if d.get("exchange") is not None]
    assert llm and len(details["exchanges"]) <= len(exchanges)
    x = details["exchanges"][str(llm[0]["exchange"])]
    assert x["prompt"].startswith("Make this kernel faster.") and llm[0]["edit"] in x["answer"]
    failed = next(d for d in details["nodes"].values() if d["status"] == "wrong_output")
    assert failed["message"].startswith("C: 12 of 16384 elements differ")


def test_an_llm_candidate_shows_its_prompt_and_answer(tmp_path, chat_server):
    """The real LLM proposer against the local scripted Chat Completions server, a fake evaluator
    (tests/test_search_llm_store.py's, named as one), the real store: the page gives the node the
    model made its exchange, and the root the edit that did not apply."""
    from optiml.app.records import StoreObserver
    from optiml.edits.llm import LLMProposer
    from optiml.search import MCTS, SearchConfig
    from tests.test_edits_llm import MISS, NAME, PAD, SOURCE
    from tests.test_search_llm_store import FakePaddingEvaluator

    chat_server.script(Reply(MISS), Reply(PAD), Reply(MISS), Reply(MISS))
    proposer = LLMProposer(model="scripted-model", base_url=chat_server.url, api_key="x", timeout_s=5, max_retries=0)
    with TraceStore(tmp_path / "llm.db") as store:
        run = store.start_run(NAME)
        ev = FakePaddingEvaluator()
        MCTS(SOURCE, ev, proposer, config=SearchConfig(budget=1, k_w=1.0), observer=StoreObserver(store, run, ev),
             task="toy", entry=NAME).run()
        html = html_report(store, run)
    view, details = page_parts(html)
    child = next(d for d in details["nodes"].values() if d["parent"] is not None)
    x = details["exchanges"][str(child["exchange"])]
    assert child["proposer"] == "llm" and x["model"] == "scripted-model" and x["tokens_in"] > 0
    assert x["answer"].startswith("EDIT: pad Bs") and NAME in x["prompt"] and PAD_B.strip("+ ") in child["diff"]
    root = next(d for d in details["nodes"].values() if d["parent"] is None)
    assert root["attempts"] and root["attempts"][0][1] == "edit_failed" and "matches nothing" in root["attempts"][0][2]
    assert "llm 1" in html and "scripted-model" in html                         # the summary's proposers and models


def test_text_from_the_database_cannot_break_out_of_the_page(tmp_path):
    """Edits, rationales and sources are the model's or the user's text: the page escapes them."""
    db = tmp_path / "t.db"
    with TraceStore(db) as store:
        ids = make_trajectory(store)
        evil = "</script><script>alert(1)</script>"
        node = store.add_node(ids["run"], ids["bounded"], "// " + evil + "\n", edit=evil, rationale=evil)
        store.finish_node(node, {"status": "ok", "median_ms": 0.5, "result": {"status": "ok", "median_ms": 0.5}})
        html = html_report(store, ids["run"])
    assert evil not in html
    view, details = page_parts(html)
    assert details["nodes"][str(node)]["edit"] == evil and [n["edit"] for n in view["nodes"]][-1] == evil
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html          # in the path to the best


def test_report_data_of_an_unfinished_run(tmp_path):
    """make_trajectory: a pending node, a wrong answer, no final figure; the best by the search's rule."""
    with TraceStore(tmp_path / "t.db") as store:
        ids = make_trajectory(store)
        data = report_data(store, ids["run"])
    s = data["summary"]
    assert s["best_node"] == ids["bounded"] and s["final"] is None and s["best_speedup"] == pytest.approx(2.0)
    assert dict(s["statuses"]) == {"ok": 3, "wrong_answer": 1, "pending": 1}
    groups = {g["status"]: g for g in data["failures"]["groups"]}
    assert groups["wrong_answer"]["examples"][0]["nodes"] == [ids["wrong"]]
    assert groups["pending"]["examples"][0]["message"] == "(not evaluated yet)"
    wrong = data["details"]["nodes"][ids["wrong"]]
    assert wrong["verify_facts"] == "max_abs_err 3" and wrong["parent_flags"] == ""
    assert [p["node"] for p in data["points"]] == [ids["seed"], ids["padded"], ids["wrong"], ids["bounded"]]
    assert [p["best"] for p in data["points"]] == [1.0, 1.6, 1.6, 2.0]


def test_report_data_of_a_run_whose_final_timing_failed_and_that_stopped_early(tmp_path):
    """A final figure that is not ok is said as status and message (no speedup claimed); a search that
    ran out of proposals keeps its sentence; a final ok figure carries its interval and edits."""
    with TraceStore(tmp_path / "t.db") as store:
        ids = make_trajectory(store)
        store.set_run_result(ids["run"], {"status": "runtime_error", "message": "the final timing faulted",
                                          "stopped": "the search stopped after 4 of 8 candidates"})
        s = report_data(store, ids["run"])["summary"]
        assert s["final"] is None and s["final_failed"] == "runtime_error: the final timing faulted"
        assert s["stopped"] == "the search stopped after 4 of 8 candidates"
        store.set_run_result(ids["run"], {"status": "wrong_output"})
        s = report_data(store, ids["run"])["summary"]
        assert s["final_failed"] == "wrong_output" and "stopped" not in s
        store.set_run_result(ids["run"], {"status": "ok", "speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1,
                                          "seed_ms": 2.0, "best_ms": 1.0, "best_edits": ["pad"], "best_node": ids["bounded"]})
        s = report_data(store, ids["run"])["summary"]
        assert "final_failed" not in s and (s["final"]["speedup"], s["final"]["low"], s["final"]["high"]) == (2.0, 1.9, 2.1)
        assert s["final"]["edits"] == ["pad"] and s["final"]["seed_ms"] == 2.0


def test_report_errors_are_one_sentence(tmp_path):
    assert_one_sentence_error(CliRunner().invoke(main, ["report", "9", "--db", str(H100), "-o", str(tmp_path / "x.html")]),
                              "no run 9")
    assert_one_sentence_error(CliRunner().invoke(main, ["report", "--db", str(tmp_path / "none.db")]),
                              "no trace database here")
    old = tmp_path / "old.db"
    shutil.copy(DATA / "traces" / "recorded_h200_runs.db", old)
    assert_one_sentence_error(CliRunner().invoke(main, ["report", "--db", str(old)]), "optiml upgrade")
    assert_one_sentence_error(CliRunner().invoke(main, ["report", "1", "--db", str(H100), "-o",
                                                        str(tmp_path / "no" / "dir" / "r.html")]),
                              "cannot write the report")
    r = CliRunner().invoke(main, ["report", "--db", str(H100), "-o", str(tmp_path / "ok.html")])
    assert r.exit_code == 0 and "ok.html: run 1 (sgemm_tiled_conflicts), 31 candidates" in r.output
    assert not (H100.parent / (H100.name + "-wal")).exists()                 # opened read-only


def test_durations_read_in_seconds_minutes_or_hours():
    """The page's wall-time figures: seconds under two minutes, minutes under two hours, then hours."""
    from optiml.traces.html.render import _duration

    assert [_duration(s) for s in (None, 0.4, 59.6, 119.4, 120.0, 7199.0, 7200.0, 36000.0)] == \
        ["-", "0 s", "60 s", "119 s", "2.0 min", "120.0 min", "2.0 h", "10.0 h"]


def test_a_candidate_nvcc_refused_shows_its_log_and_a_wrong_one_does_not(tmp_path):
    """The page's details: nvcc's log where the build failed (what the user needs to see); a candidate
    that built and then failed verification shows its verification facts, not its build's warnings."""
    with TraceStore(tmp_path / "t.db") as store:
        ids = make_trajectory(store)
        broken = store.add_node(ids["run"], ids["seed"], "__global__ void k( {\n", proposer="llm", edit="broken")
        store.finish_node(broken, {"status": "compile_error", "build_log": "k.cu(1): error: expected a \")\""},
                          status="failed")
        warned = store.add_node(ids["run"], ids["seed"], "__global__ void k() { int unused; }\n", proposer="llm")
        store.finish_node(warned, {"status": "wrong_output", "build_log": "k.cu(1): warning #177-D: unused",
                                   "verify": {"max_abs_err": 2.0}}, status="failed")
        nodes = report_data(store, ids["run"])["details"]["nodes"]
    assert nodes[broken]["build_log"] == 'k.cu(1): error: expected a ")"'
    with TraceStore(tmp_path / "t.db") as store:          # a log longer than the page keeps: its head, and the rest counted
        long_log = store.add_node(ids["run"], ids["seed"], "__global__ void k( {}\n", proposer="llm")
        store.finish_node(long_log, {"status": "compile_error", "build_log": "e" * 7000}, status="failed")
        shown = report_data(store, ids["run"])["details"]["nodes"][long_log]["build_log"]
    assert shown == "e" * 6000 + "\n... (1000 more characters in the database)"
    assert "build_log" not in nodes[warned] and nodes[warned]["verify_facts"] == "max_abs_err 2"
