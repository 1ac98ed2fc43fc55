import math

import pytest

from optiml.search.reward import REGRESSION_PENALTY, metric_terms, reward


def test_ok_reward_is_log_speedup_over_root():
    assert reward({"status": "ok", "median_ms": 5.0}, root_ms=10.0, parent_ms=None) == pytest.approx(math.log(2))
    assert reward({"status": "ok", "median_ms": 10.0}, root_ms=10.0, parent_ms=None) == pytest.approx(0.0)
    assert reward({"status": "ok", "median_ms": 20.0}, root_ms=10.0, parent_ms=None) < 0


@pytest.mark.parametrize("status,expected", [("wrong_output", -1.0), ("runtime_error", -1.0), ("timeout", -1.0),
                                             ("compile_error", -0.5), ("build_timeout", -0.5)])
def test_failures_are_never_positive_however_fast(status, expected):
    ev = {"status": status, "median_ms": 1e-6, "metrics": {"achieved_occupancy_pct": 100.0, "sm_throughput_pct": 100}}
    assert reward(ev, root_ms=10.0, parent_ms=10.0) == expected


def test_metric_terms_steer_but_do_not_decide():
    good = {"achieved_occupancy_pct": 100.0, "smem_ld_conflict_ratio": 0.0, "sm_throughput_pct": 90.0,
            "memory_throughput_pct": 40.0}
    bad = {"achieved_occupancy_pct": 10.0, "smem_ld_conflict_ratio": 0.9}
    assert metric_terms(good) == pytest.approx(0.05 * 1.0 + 0.05 * 0.9)
    assert metric_terms(bad) == pytest.approx(0.05 * 0.1 - 0.05 * 0.9)
    assert metric_terms({"achieved_occupancy_pct": 100, "sm_throughput_pct": 100, "tensor_pipe_active_pct": 100}) \
        - metric_terms({"smem_ld_conflict_ratio": 1.0}) == pytest.approx(0.2)
    assert metric_terms({}) == 0.0 and metric_terms({"achieved_occupancy_pct": "n/a"}) == 0.0
    # a 25 % speedup outweighs any metric difference (they span at most 0.2)
    fast_bad = reward({"status": "ok", "median_ms": 7.5, "metrics": bad}, 10.0, None)
    slow_good = reward({"status": "ok", "median_ms": 10.0, "metrics": good}, 10.0, None)
    assert fast_bad > slow_good


def test_regression_beyond_parent_noise_is_penalised():
    ev = {"status": "ok", "median_ms": 8.0}
    base = reward(ev, root_ms=10.0, parent_ms=None)
    # within 2x the parent's spread: no penalty
    assert reward(ev, 10.0, parent_ms=7.9, parent_spread=0.02) == pytest.approx(base)
    # slower than the parent beyond the noise: penalised, even though faster than the root
    assert reward(ev, 10.0, parent_ms=7.0, parent_spread=0.02) == pytest.approx(base - REGRESSION_PENALTY)
    # a noisy parent tolerates more
    assert reward(ev, 10.0, parent_ms=7.0, parent_spread=0.1) == pytest.approx(base)
