"""Adversarial kernels on the GPU: every case of tests/data/adversarial/cases.py through the
pipeline gets its expected status, and after each one a good kernel, evaluated with the same
builder and the same harness, still verifies (the search goes on). Run on a GPU machine
(see README):

    python3 -m pytest -m gpu tests/gpu/test_gpu_adversarial.py -v
"""
import re
import sys

import pytest

from optiml.build import detect_arch
from optiml.verify.harness import LOG_TAIL
from tests.data.adversarial import cases as adv

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def arch():
    return detect_arch()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def run(case: adv.AdversarialCase, arch: str, cache):
    """The case's evaluation, then the good kernel's with the same builder and harness."""
    builder = adv.builder_for(case, arch, cache)
    harness = adv.harness_for(case)
    ev = adv.evaluate(case.kernel, builder, harness, time_it=case.time_it, sanitizer=adv.sanitizer_for(case),
                      proposal_on=case.proposal_on)
    good = adv.evaluate(adv.GOOD, builder, harness)
    return ev, good


@pytest.fixture(scope="module")
def evaluated(arch, cache):
    """``evaluated(name)``: run(case) once per module; the detailed tests below reuse it."""
    done = {}

    def get(name):
        if name not in done:
            done[name] = run(adv.case(name), arch, cache)
        return done[name]

    return get


def _params():
    for c in adv.CASES:
        marks = [pytest.mark.xfail(strict=False, reason=f"known gap: {c.known_gap}")] if c.known_gap else []
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_case_gets_its_status_and_the_search_goes_on(evaluated, case):
    ev, good = evaluated(case.name)
    print(f"{case.name}: {ev.status}: {ev.message[:200]}", file=sys.stderr)
    assert ev.status == case.expected, (ev.status, ev.message)
    if case.expected != "ok":
        assert ev.message and ev.median_ms is None          # a failed kernel is never timed
    if case.check is not None:
        failed = ev.harness.failed_checks
        assert len(failed) == 1 and failed[0].failed_check == case.check, [c.message for c in failed]
    assert good.status == "ok", (good.status, good.message)


def test_memorized_kernel_fails_on_the_first_fresh_input(evaluated):
    ev, _ = evaluated("vadd_memorized")
    assert ev.status == "wrong_output"
    checks = ev.harness.checks
    assert len(checks) == 1 and checks[0].sizes == {"N": 1000} and checks[0].seed != 1234
    assert checks[0].outputs[0].mismatched > 900          # nearly every element is someone else's answer


def test_cached_kernel_passes_its_first_launch_and_fails_the_replay(evaluated):
    ev, _ = evaluated("vadd_cached")
    assert ev.status == "wrong_output"
    first, second = ev.harness.checks                     # verification stops at the first failure
    assert first.passed and not second.passed
    assert first.sizes == second.sizes and first.seed != second.seed
    assert second.failed_check == "tolerance"


def test_race_is_wrong_every_time(arch, cache, evaluated):
    case = adv.case("reduce_race")
    for attempt in range(3):
        ev, _ = evaluated(case.name) if attempt == 0 else run(case, arch, cache)
        assert ev.status == "wrong_output", (attempt, ev.status, ev.message)
        failed = ev.harness.failed_checks[0]
        print(f"reduce_race attempt {attempt}: {failed.message}", file=sys.stderr)


def test_register_hog_is_refused_for_its_resources(evaluated):
    ev, _ = evaluated("vadd_registers")
    assert ev.status == "launch_config_error"             # from ptxas's count, before the GPU
    assert ev.resources.registers > 200
    assert "CUDA would refuse the launch" in ev.message, ev.message
    assert ev.harness is None


def test_shared_memory_hog_is_refused(evaluated):
    ev, _ = evaluated("vadd_smem_huge")
    assert ev.status == "launch_error"
    assert "invalid" in ev.message.lower(), ev.message    # cuFuncSetAttribute or the launch: invalid value/argument
    assert ev.launch.shared_mem == 1 << 20


def test_printf_flood_is_kept_as_a_bounded_tail(evaluated):
    ev, good = evaluated("vadd_printf_flood")
    assert ev.status == "ok", ev.message
    tail = ev.harness.log_tail
    m = re.match(r"\[\.\.\. (\d+) bytes of child output omitted \.\.\.\]\n", tail)
    assert m, tail[:200]
    omitted = int(m.group(1))
    print(f"vadd_printf_flood: {omitted + LOG_TAIL} bytes of child output, {len(tail)} kept", file=sys.stderr)
    assert omitted > 1_000_000                            # it did print megabytes
    assert len(tail) <= LOG_TAIL + len(m.group(0))
    assert "vadd_printf_flood: thread" in tail
    assert ev.harness.wall_s < 120 and "vadd_printf_flood" not in good.harness.log_tail


def test_hang_is_stopped_in_the_candidate(evaluated):
    ev, _ = evaluated("vadd_hang")
    assert ev.status == "timeout" and "candidate" in ev.message
    assert ev.harness.wall_s < 60



def test_a_time_past_the_speed_of_light_is_a_finding_that_names_counts(evaluated):
    ev, _ = evaluated("vadd_overcounted")
    assert ev.status == "beyond_bound" and ev.median_ms is None
    sol = ev.speed_of_light
    assert sol["recheck_status"] == "beyond_bound" and sol["first_ms"] * 1.15 < sol["bound_ms"]
    assert "[counts]" in ev.message and "verified twice" in ev.message
    print(f"vadd_overcounted: {ev.message}", file=sys.stderr)


def test_small_outputs_pass_the_elementwise_check_and_fail_the_relative_one(evaluated):
    """The zero-writing softmax at the timing size: every element within atol, the relative error 1."""
    ev, _ = evaluated("softmax_zeros_long")
    failed = ev.harness.failed_checks[0]
    out = failed.outputs[0]
    assert failed.sizes == {"batch_size": 64, "dim": 262144}
    assert out.mismatched == 0 and out.rel_l2_err == pytest.approx(1.0) and out.atol_vacuous
    ok, _ = evaluated("softmax_ok")
    assert ok.status == "ok" and max(o.rel_l2_err for c in ok.harness.checks for o in c.outputs) < 1e-5
    assert any("exceeds the reference's RMS" in n for n in ok.harness.notes())
