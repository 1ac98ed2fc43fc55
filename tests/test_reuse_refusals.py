"""When :func:`cache_rereads` keeps a re-read element in registers and when it does not: a read
the first loop makes only under a condition is not cached, and a kernel that already uses both
names for the cache size is refused with a sentence saying so."""
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
