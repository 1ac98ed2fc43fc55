"""bench/search_quality/against_kernel_tuner.py and kt_replay.py on the CPU: the metrics on hand-made
traces, Kernel Tuner's simulation mode over a small synthetic space
(tests/data/spaces/synthetic_small.json), and the table end to end."""
import json
import math
import subprocess
import sys

import pytest

from tests.conftest import DATA, ROOT

sys.path.insert(0, str(ROOT / "bench" / "search_quality"))

import against_kernel_tuner as sq  # noqa: E402

SPACE_FILE = DATA / "spaces" / "synthetic_small.json"
SPACE = json.loads(SPACE_FILE.read_text())
OK = sorted(p[-1] for p in SPACE["points"] if p[-2] == "ok")
FAILED = [p for p in SPACE["points"] if p[-2] != "ok"]
# the same space with every working point's time distinct, so a trace's values name its points
DISTINCT = dict(SPACE, points=[p[:-1] + [p[-1] + i * 1e-6] if p[-2] == "ok" else p for i, p in enumerate(SPACE["points"])])
DISTINCT_OK = {p[-1] for p in DISTINCT["points"] if p[-2] == "ok"}


# ----------------------------------------------------------------------------- the metrics
def test_optimum_is_the_fastest_working_point():
    assert sq.optimum(SPACE) == OK[0] == 1.0
    assert sq.optimum({"points": [[1, "ok", 2.0], [2, "compile_error", None], [3, "ok", 1.5]]}) == 1.5


def test_evals_to_within_one_percent_is_the_first_one_based_index():
    assert sq.evals_to_within([None, 3.0, 1.02, 1.0101, 1.01, 1.0], 1.0) == 5    # 1.01 x optimum counts
    assert sq.evals_to_within([1.005, 2.0], 1.0) == 1
    assert sq.evals_to_within([2.2, 2.0], 2.0) == 2
    assert sq.evals_to_within([None, 1.5, 1.02], 1.0) == math.inf
    assert sq.evals_to_within([], 1.0) == math.inf


def test_best_ratio_looks_at_the_first_budget_evaluations_only():
    trace = [None, 2.0, 1.5, None, 1.0]
    assert sq.best_ratio(trace, 1.0, 1) == math.inf
    assert sq.best_ratio(trace, 1.0, 2) == 2.0
    assert sq.best_ratio(trace, 1.0, 4) == 1.5
    assert sq.best_ratio(trace, 0.5, 5) == 2.0


def test_summary_medians_and_never_reaching_reads_greater_than_the_budget():
    reach = [[2.0, 1.0], [3.0, 2.0, 1.0], [1.0]]                     # evaluations needed: 2, 3, 1
    s = sq.summarize(reach, 1.0, [1, 3])
    assert (s["evals"], s["reached"], s["runs"]) == (2, 3, 3)
    assert s["ratio"] == {1: 2.0, 3: 1.0}
    never = [[2.0, 1.0], [3.0, 3.0, 3.0], [None, None, 1.5]]         # 2, inf, inf: the median is inf
    s = sq.summarize(never, 1.0, [2, 3])
    assert (s["evals"], s["reached"]) == (math.inf, 1)
    assert s["ratio"] == {2: 3.0, 3: 1.5}
    row = {"space": "s", "search": "x", **s}
    assert "| s | x | >3 | 1/3 | 3.000 | 1.500 |" in sq.markdown_table([row], [2, 3])
    assert sq.text_table([row], [2, 3]).splitlines()[2].split() == ["s", "x", ">3", "1/3", "3.000", "1.500"]
    # a reach beyond the largest budget does not count
    assert sq.summarize([[2.0, 2.0, 1.0]], 1.0, [2])["evals"] == math.inf


# ----------------------------------------------------------------------------- Kernel Tuner's side
def test_cache_file_names_each_point_and_kernel_tuners_error_classes():
    import kt_replay
    cache = kt_replay.cache_json(SPACE)
    assert cache["tune_params_keys"] == ["BX", "BY", "U"] and cache["objective"] == "time"
    assert len(cache["cache"]) == len(SPACE["points"])
    assert cache["cache"]["32,2,4"]["time"] == 1.0 and cache["cache"]["32,2,4"]["BX"] == 32
    assert cache["cache"]["128,1,8"]["time"] == "CompilationFailedConfig"
    assert cache["cache"]["8,1,8"]["time"] == "InvalidConfig"          # launch_config_error
    assert cache["cache"]["16,4,1"]["time"] == "RuntimeFailedConfig"   # wrong_output
    assert cache["cache"]["128,2,4"]["time"] == "RuntimeFailedConfig"  # timeout


@pytest.mark.parametrize("strategy", ["random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt",
                                      "bayes_opt_skipfail"])
def test_kernel_tuner_trace_is_valid_points_only_and_reproducible(strategy):
    pytest.importorskip("kernel_tuner")
    from kt_replay import kernel_tuner_trace
    a = kernel_tuner_trace(DISTINCT, strategy, 3, 30)
    assert 10 <= len(a) <= 30
    ok = [t for t in a if t is not None]
    assert set(ok) <= DISTINCT_OK and len(set(ok)) == len(ok)      # listed points, each evaluated once
    assert len(a) - len(ok) <= len(FAILED)
    again = kernel_tuner_trace(DISTINCT, strategy, 3, 30)
    # Bayesian optimisation fits a Gaussian process whose optimiser can end a hair apart between
    # runs (seen once, 29 evaluations in, with other processes busy): its start must repeat exactly
    same = 20 if strategy.startswith("bayes_opt") else len(a)
    assert again[:same] == a[:same]
    assert any(kernel_tuner_trace(DISTINCT, strategy, s, 30) != a for s in (4, 5))


def test_random_sample_over_the_whole_space_evaluates_every_listed_point_once():
    pytest.importorskip("kernel_tuner")
    from kt_replay import kernel_tuner_trace
    t = kernel_tuner_trace(SPACE, "random_sample", 0, 1000)
    assert len(t) == len(SPACE["points"])                   # the budget is cut to the space; no unlisted point
    assert sorted(x for x in t if x is not None) == OK
    assert sum(x is None for x in t) == len(FAILED)


def test_bayes_opt_skipfail_keeps_failures_out_of_its_model():
    """Kernel Tuner 1.5.0's bayes_opt fits a failure as a huge valid observation and then walks the
    space in a fixed order; with the failures kept out it finds the optimum of this smooth space."""
    pytest.importorskip("kernel_tuner")
    from kt_replay import kernel_tuner_trace
    best = [min(x for x in kernel_tuner_trace(SPACE, "bayes_opt_skipfail", s, 40) if x is not None) for s in range(3)]
    assert best == [1.0, 1.0, 1.0]


# ----------------------------------------------------------------------------- the command
def test_search_quality_table_on_the_synthetic_space():
    pytest.importorskip("kernel_tuner")
    script = ROOT / "bench" / "search_quality" / "against_kernel_tuner.py"
    r = subprocess.run([sys.executable, str(script), str(SPACE_FILE), "--seeds", "2", "--budgets", "10,30",
                        "--markdown"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert "synthetic_small: 68 valid points (62 ok) of 80, optimum 1 ms" in r.stdout
    text = [line.split() for line in r.stdout.splitlines() if line.startswith("synthetic_small ")]
    md = [line for line in r.stdout.splitlines() if line.startswith("| synthetic_small |")]
    searches = [row[1] for row in text]
    assert searches[-5:] == ["random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt",
                             "bayes_opt_skipfail"]
    assert searches[0] == "optiml" or "optiml skipped" in r.stderr
    assert len(md) == len(text)
    for row in text:
        assert row[3].endswith("/2") and len(row) == 6
        assert row[2].startswith(">") or 1 <= float(row[2]) <= 30
        assert all(float(x) >= 1.0 for x in row[4:])


def test_search_quality_without_kernel_tuner_is_one_sentence():
    code = ("import runpy, sys; sys.modules['kernel_tuner'] = None; "
            f"sys.argv = ['against_kernel_tuner.py', {str(SPACE_FILE)!r}]; "
            f"runpy.run_path({str(ROOT / 'bench' / 'search_quality' / 'against_kernel_tuner.py')!r}, run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install -e '.[bench]'" in lines[0], r.stderr
