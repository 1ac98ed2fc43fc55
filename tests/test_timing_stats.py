"""The timing statistics the GPU worker uses to stop repeating (CPU only: pure functions)."""
import numpy as np
import pytest

from optiml.verify.timing_stats import median_ci, median_ci_rel, timing_stats
from tests.test_spec import SPEC, load
from optiml.spec import SpecError


def test_median_ci_is_the_order_statistics_around_the_middle():
    x = list(range(10, 0, -1))           # 1..10, unsorted
    assert median_ci(x) == (2.0, 9.0)    # n = 10: x_(2), x_(9) (97.9 % exact binomial coverage)
    assert median_ci([5.0]) == (5.0, 5.0)
    assert median_ci_rel([3.0] * 12) == 0.0
    assert median_ci_rel([]) == float("inf")


@pytest.mark.parametrize("n", [10, 30, 101])
def test_median_ci_covers_the_true_median_about_95_percent(n):
    rng = np.random.default_rng(n)
    trials = 4000
    hits = 0
    for _ in range(trials):
        lo, hi = median_ci(rng.lognormal(0.0, 0.3, n))     # skewed, like launch times; median exp(0) = 1
        hits += lo <= 1.0 <= hi
    assert 0.93 <= hits / trials <= 0.99


def test_precision_tightens_with_more_samples():
    rng = np.random.default_rng(0)
    x = 1.0 + 0.01 * rng.standard_normal(400)
    assert median_ci_rel(x[:10]) > median_ci_rel(x) > 0
    assert median_ci_rel(x) < 0.002


def test_timing_stats_records_the_precision():
    t = timing_stats([1.0, 1.01, 0.99, 1.02, 1.0, 1.0, 0.98, 1.0, 1.01, 1.0], 5, 2, True)
    assert t.reps == 10 and t.median_ms == 1.0
    assert t.median_ci_rel == pytest.approx(0.01)
    assert timing_stats([0.0] * 10, 1, 1, False).median_ci_rel is None   # nothing to divide by


def test_spec_precision_default_key_and_range(tmp_path):
    assert load(tmp_path).timing.precision == 0.005
    spec = load(tmp_path, SPEC + "\n[timing]\nprecision = 0\n")
    assert spec.timing.precision == 0
    with pytest.raises(SpecError, match=r"timing.precision must be at least 0 and below 1 .*not -0.1") as e:
        load(tmp_path, SPEC + "\n[timing]\nprecision = -0.1\n")
    assert "\n" not in str(e.value)


def test_a_plans_kernel_time_counts_its_warm_ups_with_its_timed_launches():
    from optiml.verify.timing_stats import BlockPlan
    plan = BlockPlan(rounds=3, reps=(10, 4), warmup=(2, 1))
    assert plan.own_ms((0.5, 2.0)) == 3 * ((10 + 2) * 0.5 + (4 + 1) * 2.0)
