"""When :func:`cache_rereads` keeps a re-read element in registers and when it does not: a read
the first loop makes only under a condition is not cached, and a kernel that already uses both
names for the cache size is refused with a sentence saying so."""
import pytest

from optiml.edits.reuse import cache_rereads

from .test_edits_reductions import RMSNORM


def test_the_norm_itself_is_cached():
    ts, why = cache_rereads(RMSNORM, "rms")
    assert why is None and ts


def test_a_read_the_first_loop_makes_only_under_a_condition_is_not_cached():
    """The first loop reads ``xc[k * sp]`` inside an ``if``: it is not a read every iteration makes,
    so there is nothing the first loop is sure to have loaded for the later one."""
    guarded = RMSNORM.replace("        float v = xc[(size_t)k * sp];\n        ss += v * v;\n",
                              "        if (ss < 1e30f) ss += xc[(size_t)k * sp] * xc[(size_t)k * sp];\n")
    assert guarded != RMSNORM
    assert cache_rereads(guarded, "rms") == ([], None)


def test_a_read_behind_a_short_circuit_is_not_cached():
    guarded = RMSNORM.replace("        float v = xc[(size_t)k * sp];\n        ss += v * v;\n",
                              "        ss += (ss < 1e30f && xc[(size_t)k * sp] > 0.f) ? 1.f : 0.f;\n")
    assert guarded != RMSNORM
    assert cache_rereads(guarded, "rms") == ([], None)


def test_no_free_name_for_the_cache_size_is_a_refusal_with_its_reason():
    taken = "// OPTIML_CACHE_ITEMS and OPTIML_REG_CACHE_ITEMS are taken\n" + RMSNORM
    ts, why = cache_rereads(taken, "rms")
    assert ts == [] and why == "not cached: no free name for the cache size"


def test_one_name_taken_uses_the_other():
    ts, why = cache_rereads("// OPTIML_CACHE_ITEMS is taken\n" + RMSNORM, "rms")
    assert why is None and ts and "#define OPTIML_REG_CACHE_ITEMS 16" in ts[0].source


@pytest.mark.parametrize("change, why", [
    (lambda s: s.replace("k < f; k++) {", "k < f; k += st) {").replace("k < f; k++) yc", "k < f; k += st) yc")
     .replace("float eps)", "float eps, int st)"), "not cached: the loops' step st is not known to be positive"),
    (lambda s: s.replace("    float r = rsqrtf", "    sp = sp + 1;\n    float r = rsqrtf"),
     "not cached: sp changes between or inside the loops"),
    (lambda s: s.replace("ss += v * v;", "ss += v * v; k += 0;"), "not cached: a loop body changes k"),
    (lambda s: s.replace("ss += v * v;", "ss += v * v; __syncthreads();"),
     "not cached: a loop body synchronises threads (an unrolled guard would split the barrier)"),
    (lambda s: s.replace("ss += v * v;", "ss += v * v; if (ss > 1e30f) break;"),
     "not cached: a loop body leaves the loop early"),
], ids=["a_step_not_known_positive", "a_size_changed_between", "the_loop_variable_changed", "a_barrier", "a_break"])
def test_loops_whose_unrolled_copy_would_differ_are_refused_with_the_reason(change, why):
    source = change(RMSNORM)
    assert source != RMSNORM
    assert cache_rereads(source, "rms") == ([], why)
