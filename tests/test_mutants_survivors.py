"""Tests written for mutants of bench/mutants/mutants.py that the suite let through."""
import numpy as np
import pytest

from optiml.best import Ranked, choose_best
from optiml.edits.llm import LLMProposer
from optiml.edits.types import NodeView
from optiml.search.reward import BUILD_FAILURE_REWARD, REGRESSION_PENALTY, RUNTIME_FAILURE_REWARD, reward
from optiml.verify.compare import check_output


@pytest.mark.parametrize("status", ["edit_failed", "duplicate"])
def test_a_proposal_that_never_became_a_candidate_costs_a_build_failure(status):
    assert reward({"status": status}, 1.0, 1.0) == BUILD_FAILURE_REWARD
    assert reward({"status": "wrong_output", "median_ms": 0.1}, 1.0, 1.0) == RUNTIME_FAILURE_REWARD


def test_a_negative_parent_spread_counts_as_none():
    ok = {"status": "ok", "median_ms": 1.0}
    assert reward(ok, 1.0, 1.0, -0.5) == pytest.approx(0.0)
    assert reward(dict(ok, median_ms=1.01), 1.0, 1.0, -0.5) == pytest.approx(np.log(1 / 1.01) - REGRESSION_PENALTY)


def test_a_timing_without_spread_gets_the_default_band():
    # the fastest has no spread: the band is 2 * DEFAULT_SPREAD (4 %), so one edit at +3 % wins
    best = choose_best([Ranked("deep", 1.0, None, 3, 1), Ranked("shallow", 1.03, 0.001, 1, 2)])
    assert best.key == "shallow"
    assert choose_best([Ranked("deep", 1.0, None, 3, 1), Ranked("far", 1.05, 0.001, 1, 2)]).key == "deep"


def test_an_output_of_another_size_is_all_mismatched():
    ref = np.zeros(4, np.float32)
    for out in (np.zeros(6, np.float32), np.zeros(3, np.float32)):
        c = check_output("y", out, ref, "float32", 1e-4, 1e-4)
        assert c.mismatched == max(out.size, ref.size) and c.failed_check == "tolerance"


def test_a_cut_off_is_said_only_for_an_answer_cut_at_max_tokens():
    llm = LLMProposer("m", base_url="http://127.0.0.1:9", api_key="x")
    view = NodeView(source="int a = 1;\n", flags=(), entry="k")
    bad = "<<<<<<< SEARCH\nint q = 0;\n=======\nint q = 1;\n>>>>>>> REPLACE\n"
    ex = {"tokens_in": 1, "tokens_out": 1, "latency_s": 0.0}
    assert "cut off" not in llm._proposal(view, dict(ex), bad, "stop").error
    assert llm._proposal(view, dict(ex), bad, "length").error.endswith("(the answer was cut off at max_tokens=4096)")
