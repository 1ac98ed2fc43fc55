"""The search's record of one evaluated candidate: verified or not, and its stored form."""
import math

from optiml.search.result import Result
from optiml.status import Status


def test_only_a_verified_result_is_ok():
    assert Result(Status.OK, median_ms=1.0).ok and Result("ok").ok
    for s in ("wrong_output", "compile_error", "unsafe", "pending", "worker_lost"):
        assert not Result(s).ok


def test_the_stored_form_reads_back_as_the_same_result():
    r = Result(Status.OK, "fine", 1.5, 0.02, {"dram_throughput_pct": 80.0}, ("Memory-bound.",),
               {"registers": 32}, {"build": 0.5}, {"bound_ms": 1.0}, {"status": "clean"})
    d = r.to_dict()
    assert d["status"] == "ok" and d["diagnosis"] == ["Memory-bound."] and Result.from_dict(d) == r
    assert Result.of(d) == r and Result.of(r) is r
    back = Result.from_dict({"status": None, "spread": math.nan, "median_ms": None, "unknown_key": 1})
    assert back.status == "harness_error" and back.spread is None and back.median_ms is None
