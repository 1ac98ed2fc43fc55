"""The relative (scale-free) check: an output unrelated to the reference fails at every size, however
small the outputs are against atol; honest rounding passes. Host arrays only (check_output and its
NumPy mirror of the GPU compare, host_compare)."""
import numpy as np
import pytest

from optiml import dtypes
from optiml.errors import SpecError
from optiml.verify.compare import SIGNIFICANT, OutputCheck, check_output, summarize
from optiml.verify.gpu_ops import host_compare

ATOL, RTOL = 1e-4, 1e-4          # what init --kernelbench used to draft for every float32 task
REL = dtypes.DEFAULT_REL_RMS["float32"]
SIZES = (256, 4096, 65536, 393216)


def softmax_rows(n: int, rows: int = 2, seed: int = 0, uniform: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(input, softmax in float64 cast to float32) for ``rows`` rows of ``n``, the input standard
    normal or (``uniform``, as KernelBench's torch.rand) uniform on [0, 1)."""
    rng = np.random.default_rng(seed)
    x = (rng.random((rows, n)) if uniform else rng.standard_normal((rows, n))).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return x, (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def both(out, ref, dtype="float32", atol=ATOL, rtol=RTOL, rel=REL):
    """check_output's verdict, after asserting the GPU compare's mirror gives the same."""
    a = check_output("y", out, ref, dtype, atol, rtol, rel_rms=rel)
    b = host_compare("y", out, ref, dtype, atol, rtol, rel_rms=rel)
    assert a.failed_check == b.failed_check, (a, b)
    assert a.gross_ref == b.gross_ref and a.ref_rms == pytest.approx(b.ref_rms, rel=1e-5)
    return a


def _fixed_outputs(x, ref, seed):
    """Answers that do not depend on the reference: what a cheating kernel can write."""
    _, other = softmax_rows(ref.shape[1], ref.shape[0], seed=seed + 100)
    half = ref.copy()
    half[:, ref.shape[1] // 2:] = 0
    return {
        "zeros": np.zeros_like(ref),
        "constant": np.full_like(ref, np.float32(ref.mean())),
        "uniform 1/n": np.full_like(ref, np.float32(1.0 / ref.shape[1])),
        "copy of the input": x.copy(),
        "the previous launch's output": other,
        "scaled by 1.01": (ref * np.float32(1.01)).astype(np.float32),
        "scaled by 0.995": (ref * np.float32(0.995)).astype(np.float32),
        "half the row zero": half,
        "normalised over half the row": _half_softmax(x),
        "one row zero": np.vstack([ref[:1], np.zeros_like(ref[1:])]),
    }


def _half_softmax(x):
    h = x[:, : x.shape[1] // 2].astype(np.float64)
    e = np.exp(x.astype(np.float64) - h.max(axis=1, keepdims=True))
    return (e / e[:, : x.shape[1] // 2].sum(axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("n", SIZES)
def test_fixed_outputs_fail_at_every_size(n, uniform):
    x, ref = softmax_rows(n, uniform=uniform)
    for what, out in _fixed_outputs(x, ref, n).items():
        c = both(out, ref)
        assert c.failed_check is not None, f"{what} passed at n={n}: {c}"


def test_zeros_pass_the_elementwise_check_where_the_outputs_are_small():
    """The hole the relative check closes: at the long row every softmax value is under atol."""
    x, ref = softmax_rows(393216, uniform=True)
    zeros = np.zeros_like(ref)
    assert check_output("y", zeros, ref, "float32", ATOL, RTOL).failed_check is None      # elementwise only
    c = both(zeros, ref)
    assert c.failed_check == "relative" and c.rel_l2_err == pytest.approx(1.0)
    case = summarize(0, {"N": 393216}, 1, [c], [])
    assert not case.passed and "relative RMS error 1 over its bound 0.001" in case.message
    assert "within atol 0.0001" in case.message


@pytest.mark.parametrize("n", SIZES)
def test_honest_float32_results_pass(n):
    """A float32 softmax (float32 exp and sums, another order) and a float64 one cast: both pass."""
    x, ref = softmax_rows(n)
    e = np.exp(x - x.max(axis=1, keepdims=True))                        # float32 throughout
    mine = (e / np.cumsum(e, axis=1)[:, -1:]).astype(np.float32)         # sequential sum, not pairwise
    for out in (mine, ref.copy()):
        c = both(out, ref)
        assert c.failed_check is None, c
        assert c.rel_l2_err < REL / 10      # a sequential sum of 393216 terms: 1.2e-5


def test_a_gemm_with_tf32_rounding_passes_and_float16_accumulation_fails():
    """The float32 bound sits between TF32-class rounding (inputs to 10 mantissa bits, float32
    sums) and a sum accumulated in float16."""
    rng = np.random.default_rng(1)
    m, k, n = 64, 2048, 64
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    ref = (a.astype(np.float64) @ b).astype(np.float32)
    tf32 = (a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32)).astype(np.float32)
    c = check_output("y", tf32, ref, "float32", 1.0, 1.0, rel_rms=REL)          # elementwise loosened by the user
    assert c.failed_check is None and 1e-5 < c.rel_l2_err < REL
    acc = np.zeros((m, n), np.float16)
    for j in range(k):                                                  # fp16 products and sums
        acc = (acc + (a[:, j:j + 1].astype(np.float16) * b[j:j + 1, :].astype(np.float16))).astype(np.float16)
    c = check_output("y", acc.astype(np.float32), ref, "float32", 1.0, 1.0, rel_rms=REL)
    assert c.failed_check == "relative" and c.rel_l2_err > REL


def test_a_gross_element_among_a_million_fails_where_the_rms_alone_would_pass():
    rng = np.random.default_rng(2)
    ref = rng.uniform(0.5, 1.5, 4_000_000).astype(np.float32) * np.float32(1e-7)   # all under atol
    out = ref.copy()
    out[123_456] = 0.0
    c = both(out, ref)
    assert c.rel_l2_err < REL and c.failed_check == "relative"
    assert "off by more than 50%" in c.relative_sentence()
    # an element far below the reference's RMS may be off by more (cancellation): not gross
    ref[5] = np.float32(1e-3) * ref[6]
    out = ref.copy()
    out[5] = 0.0
    assert both(out, ref).failed_check is None


def test_an_all_zero_reference_and_integer_outputs_have_no_relative_check():
    z = np.zeros(100, np.float32)
    c = both(np.full(100, 1e-5, np.float32), z)
    assert c.failed_check is None and c.ref_rms == 0.0
    ints = np.arange(10, dtype=np.int32)
    assert check_output("i", ints, ints, "int32", 0, 0, rel_rms=REL).rel_rms_bound is None


def test_a_constant_reference_is_still_checked():
    ref = np.full(1000, 3e-7, np.float32)
    assert both(np.zeros_like(ref), ref).failed_check == "relative"
    assert both(ref.copy(), ref).failed_check is None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_storage_rounding_passes_and_zeros_fail(dtype):
    x, ref64 = softmax_rows(8192, 1, uniform=True)
    ref = dtypes.to_storage(ref64 * 10, dtype)        # values near 1e-3 ...
    out = dtypes.to_storage(dtypes.to_values(ref, dtype).astype(np.float32) * np.float32(1.0 + 2 ** -12), dtype)
    tol = dtypes.DEFAULT_TOLERANCES[dtype]
    assert both(out, ref, dtype, *tol, rel=dtypes.DEFAULT_REL_RMS[dtype]).failed_check is None
    zeros = dtypes.to_storage(np.zeros(ref.shape, np.float32), dtype)
    c = both(zeros, ref, dtype, *tol, rel=dtypes.DEFAULT_REL_RMS[dtype])
    assert c.failed_check == "relative"                # ... all under atol 1e-2


def test_the_note_on_a_vacuous_atol():
    _, ref = softmax_rows(393216)
    c = both(ref.copy(), ref)
    case = summarize(0, {"N": 393216}, 1, [c], [])
    assert case.passed and c.atol_vacuous
    assert len(case.notes) == 1 and "atol 0.0001 exceeds the reference's RMS" in case.notes[0]
    _, small = softmax_rows(16)
    assert summarize(1, {"N": 16}, 1, [both(small.copy(), small)], []).notes == []


def test_significant_is_a_tenth_of_the_rms():
    """The documented rule: a gross element at exactly SIGNIFICANT x RMS fails; just under it does not."""
    ref = np.ones(10_000, np.float64)
    ref[0] = 0.0
    rms = float(np.sqrt(np.mean(ref ** 2)))
    for factor, fails in ((1.0, True), (0.99, False)):
        r = ref.copy()
        r[1] = SIGNIFICANT * rms * factor
        out = r.copy()
        out[1] = 0.0
        assert (check_output("y", out, r, "float64", 1.0, 0.0, rel_rms=0.5).failed_check == "relative") is fails


def _spec(tmp_path, extra: str):
    from tests.test_spec import SPEC, load
    return load(tmp_path, SPEC + "\n" + extra)


def test_spec_rel_rms_default_override_and_errors(tmp_path):
    assert _spec(tmp_path, "").tolerance("float32").rel_rms == REL
    assert _spec(tmp_path, "").tolerance("int32").rel_rms is None
    assert "rel_rms 0.001" in _spec(tmp_path, "").summary()
    spec = _spec(tmp_path, "[tolerance]\nfloat32 = { atol = 1e-3, rel_rms = 5e-3 }\n")
    t = spec.tolerance("float32")
    assert (t.atol, t.rtol, t.rel_rms) == (1e-3, 1e-4, 5e-3)
    assert _spec(tmp_path, "[tolerance]\nfloat32 = { atol = 1e-3 }\n").tolerance("float32").rel_rms == REL
    for bad, said in (("float32 = { rel_rms = 1 }", "below 1"), ("float32 = { rel_rms = 0 }", "above 0"),
                      ("int32 = { rel_rms = 0.1 }", "floating-point outputs only")):
        with pytest.raises(SpecError, match=said):
            _spec(tmp_path, f"[tolerance]\n{bad}\n")


def test_a_relative_rms_error_exactly_at_its_bound_passes_and_the_sentence_names_the_element():
    """The bound is inclusive: at it, the relative RMS check passes, and a failure there is the gross
    element's, which the sentence names."""
    at = OutputCheck("y", 10, rel_l2_err=0.01, rel_rms_bound=0.01, ref_rms=1.0)
    assert not at.relative_failed
    gross = OutputCheck("y", 10, rel_l2_err=0.01, rel_rms_bound=0.01, ref_rms=1.0, gross_ref=SIGNIFICANT * 2.0)
    assert gross.relative_failed and gross.relative_sentence().startswith("an element off by more than 50%")
    over = OutputCheck("y", 10, rel_l2_err=0.02, rel_rms_bound=0.01, ref_rms=1.0)
    assert over.relative_sentence() == "relative RMS error 0.02 over its bound 0.01; the reference's RMS is 1"
