"""Edges of the output comparison that mutants of verify/compare.py slipped through:
the sign of an Inf, the tolerance measured from the reference, an Inf in the reference, poison
counted once, and the order in which a case's failures are reported."""
import numpy as np

from optiml import dtypes as _dt
from optiml.search import MCTS, SearchConfig
from optiml.verify.compare import OutputCheck, check_output, summarize


def f32(*xs):
    return np.array(xs, dtype=np.float32)


def test_an_inf_of_the_wrong_sign_is_an_inf_failure():
    res = check_output("y", f32(1.0, -np.inf), f32(1.0, np.inf), "float32", 1e-5, 1e-5)
    assert res.inf == 1 and res.failed_check == "inf"
    same = check_output("y", f32(1.0, np.inf), f32(1.0, np.inf), "float32", 1e-5, 1e-5)
    assert same.failed_check is None


def test_the_relative_tolerance_is_taken_from_the_reference_not_the_output():
    """|out - ref| = 0.5 with rtol 0.4: within 0.4 * |out| = 0.6, outside 0.4 * |ref| = 0.4."""
    fast = check_output("y", f32(1.5, 2.0), f32(1.0, 2.0), "float32", 0.0, 0.4)
    assert fast.mismatched == 1 and fast.failed_check == "tolerance"
    slow = check_output("y", f32(1.5, 2.0, np.nan), f32(1.0, 2.0, 3.0), "float32", 0.0, 0.4)   # the full accounting
    assert slow.mismatched == 1 and slow.nan == 1


def test_an_inf_in_the_reference_is_matched_exactly_even_with_a_relative_tolerance():
    """rtol * inf is inf: a finite output would be 'within tolerance' of an infinite reference."""
    res = check_output("y", f32(1.0, 5.0), f32(1.0, np.inf), "float32", 1e-5, 1e-3)
    assert res.failed_check == "tolerance" and res.mismatched == 1


def test_poison_left_in_place_is_unwritten_and_not_also_a_mismatch():
    """A float's poison is a NaN payload, an integer's a sentinel value: either way counted once."""
    for dtype, np_type in (("float32", np.float32), ("int32", np.int32)):
        ref = np.array([1, 2, 3, 4], dtype=np_type)
        out = ref.copy()
        poison = np.ascontiguousarray(np.broadcast_to(_dt.poison_pattern(dtype), (2,)))
        out[1:3] = np.frombuffer(poison.tobytes(), dtype=np_type)
        res = check_output("y", out, ref, dtype, 0, 0)
        assert (res.unwritten, res.mismatched, res.failed_check) == (2, 0, "unwritten"), dtype


def test_a_case_reports_its_failures_in_the_documented_order():
    """unwritten, then NaN, then Inf, then a changed input, then tolerance."""
    bad = lambda **kw: OutputCheck(name=kw.pop("name", "y"), elements=4, **kw)
    assert summarize(0, {}, 1, [bad(mismatched=1), bad(name="z", unwritten=1)], []).failed_check == "unwritten"
    assert summarize(0, {}, 1, [bad(mismatched=1, nan=1)], ["x"]).failed_check == "nan"
    assert summarize(0, {}, 1, [bad(inf=1)], ["x"]).failed_check == "inf"
    assert summarize(0, {}, 1, [bad(mismatched=2)], ["x"]).failed_check == "input_modified"
    assert summarize(0, {}, 1, [bad(mismatched=2)], []).failed_check == "tolerance"
    assert summarize(0, {}, 1, [bad()], []).passed


class _Times:
    """A fake evaluator for the search loop: the seed 2 ms, every child 1 ms."""

    def evaluate(self, source, flags):
        return {"status": "ok", "median_ms": 2.0 if "child" not in source else 1.0, "spread": 0.001}


class _OneChild:
    name = "scripted"

    def propose(self, node, k, rng):
        from optiml.edits.types import Proposal
        if "child" in node.source:
            return []
        return [Proposal(source=node.source.replace("{}", "{ int child = 0; }"), flags=(), edit="child",
                         rationale="", prior=1.0)]


def test_a_root_found_unsafe_is_never_the_best():
    """The root stays ok in the tree (every reward's reference) but carries the unsafe verdict."""
    from dataclasses import replace

    m = MCTS("__global__ void k() {}\n", _Times(), _OneChild(), config=SearchConfig(budget=1))
    best = m.run()
    assert best is not m.root and best.median_ms == 1.0
    m.amend(best, replace(best.result, status="unsafe", sanitize={"status": "unsafe"}))
    slow_root = replace(m.root.result, median_ms=0.5, sanitize={"status": "unsafe", "message": "race"})
    m.amend(m.root, slow_root)
    assert m.root.status == "ok" and m.best() is None


# -- the other survivors of bench/mutants/mutants.py: the spec's checks, the store's, and poison in a reference
import pytest  # noqa: E402

from optiml.errors import SpecError  # noqa: E402
from tests.test_spec import SPEC, load  # noqa: E402


@pytest.mark.parametrize("extra, words", [
    ("\n[timing]\nprecision = 1.0\n", "precision"),
    ("\n[timing]\nmin_reps = 50\nmax_reps = 20\n", "min_reps"),
    ("\n[tolerance]\nfloat33 = { atol = 0.1 }\n", "not a known dtype"),
])
def test_the_spec_refuses_what_it_documents(tmp_path, extra, words):
    with pytest.raises(SpecError, match=words):
        load(tmp_path, SPEC + extra)


def test_a_verify_set_must_name_exactly_the_timing_sizes(tmp_path):
    two = SPEC.replace("timing = { N = 1048576 }", "timing = { N = 1048576, M = 8 }").replace(
        "verify = [{ N = 1000 }, { N = 77 }]", "verify = [{ N = 1000 }, { N = 77, M = 3 }]")
    with pytest.raises(SpecError, match="must name the same sizes"):
        load(tmp_path, two)


def test_the_store_refuses_an_evaluation_without_a_status(tmp_path):
    from optiml.traces.store import TraceStore

    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        n = store.add_node(run, None, "src")
        with pytest.raises(ValueError, match="status required"):
            store.finish_node(n, {"median_ms": 1.0})


def test_a_reference_value_equal_to_the_poison_is_not_unwritten():
    """An integer output whose true value is the sentinel: written (equal to the reference), not unwritten."""
    sentinel = np.frombuffer(np.ascontiguousarray(np.broadcast_to(_dt.poison_pattern("int32"), (1,))).tobytes(),
                             dtype=np.int32)[0]
    ref = np.array([1, sentinel, 3], dtype=np.int32)
    res = check_output("y", ref.copy(), ref, "int32", 0, 0)
    assert res.unwritten == 0 and res.failed_check is None


def test_bit_equality_compares_element_for_element_and_a_broadcast_pattern_to_its_one_value():
    """One-byte arrays too: a contiguous uint8 array has strides of 1, which is no broadcast."""
    from optiml.verify.compare import _bytes_equal

    a = np.array([1, 2, 3], np.uint8)
    assert _bytes_equal(a, a.copy()).tolist() == [True, True, True]
    assert _bytes_equal(a, np.broadcast_to(np.uint8(2), (3,))).tolist() == [False, True, False]
    f = np.array([0.5, -0.0, 0.0], np.float32)
    assert _bytes_equal(f, np.broadcast_to(np.float32(0.0), (3,))).tolist() == [False, False, True]
