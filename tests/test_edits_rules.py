"""The rules proposer and its transforms, on the real examples, built with the real nvcc."""
import random
import shutil

import pytest

from optiml.build import NvccBuilder
from optiml.edits.rules import RulesProposer
from optiml.edits.transforms import add_const, all_transforms, pad_shared, tune_constants
from optiml.edits.types import Attempt, NodeView

from .conftest import EXAMPLES

NAMES = ["sgemm_naive", "sgemm_tiled_conflicts", "transpose_naive", "softmax_rows", "reduce_sum"]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def src(name):
    return (EXAMPLES / name / f"{name}.cu").read_text()


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    return NvccBuilder("sm_90", cache_dir=tmp_path_factory.mktemp("edits-cache"))


@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_every_transform_of_an_example_compiles(name, builder):
    transforms = all_transforms(src(name), name, ("-O3",), registers=96)
    kinds = {t.kind for t in transforms}
    assert {"tune", "restrict", "flag"} <= kinds
    assert len({t.edit for t in transforms}) == len(transforms)   # edits are distinct
    for t in transforms:
        r = builder.build(t.source, ("-O3",) + t.flags)
        assert r.ok, f"{t.edit}:\n{r.log}"


@needs_nvcc
def test_padding_the_tiled_sgemm(builder):
    pads = {t.edit: t for t in pad_shared(src("sgemm_tiled_conflicts"))}
    t = pads["pad Bs[TILE][TILE] -> Bs[TILE][TILE + 1]"]
    assert "__shared__ float Bs[TILE][TILE + 1];" in t.source
    assert "__shared__ float As[TILE][TILE];" in t.source
    assert t.hint > pads["pad As[TILE][TILE] -> As[TILE][TILE + 1]"].hint   # Bs is read down columns
    assert builder.build(t.source, ("-O3",)).ok


def test_padding_takes_two_dimensional_four_byte_shared_arrays_only():
    """A 2-D float tile read down its columns is padded; a 3-D one, a 1-D one and a 2-byte one are not
    (the one-extra-column layout is the 2-D, 4-byte case's)."""
    src3 = ("__global__ void k(float *o) {\n    __shared__ float s[4][32][32];\n    int tx = threadIdx.x, ty = threadIdx.y;\n"
            "    s[0][ty][tx] = o[tx];\n    __syncthreads();\n    o[tx] = s[0][tx][ty];\n}\n")
    src2 = src3.replace("s[4][32][32]", "t[32][32]").replace("s[0][ty][tx]", "t[ty][tx]").replace("s[0][tx][ty]", "t[tx][ty]")
    assert [t.edit for t in pad_shared(src2)] == ["pad t[32][32] -> t[32][32 + 1]"]
    assert pad_shared(src3) == []
    assert pad_shared(src2.replace("__shared__ float t[32][32]", "__shared__ float t[1024]")
                      .replace("t[ty][tx]", "t[ty * 32 + tx]").replace("t[tx][ty]", "t[tx * 32 + ty]")) == []
    assert pad_shared(src2.replace("__shared__ float t", "__shared__ short t")) == []


def node(name, **kw):
    return NodeView(source=src(name), entry=name, **kw)


def test_no_padding_without_conflicts_and_padding_first_with_them():
    zero = RulesProposer().propose(node("sgemm_tiled_conflicts", metrics={
        "smem_ld_bank_conflicts": 0, "smem_st_bank_conflicts": 0}), 50, random.Random(1))
    assert zero and not any(p.edit.startswith("pad") for p in zero)
    assert not any(p.edit.startswith("pad") for p in RulesProposer().propose(
        node("sgemm_tiled_conflicts"), 50, random.Random(1)))
    top = RulesProposer().propose(node("sgemm_tiled_conflicts", metrics={"smem_ld_bank_conflicts": 1.9e9}),
                                  3, random.Random(1))
    assert top[0].edit == "pad Bs[TILE][TILE] -> Bs[TILE][TILE + 1]"
    assert "Bs[TILE][TILE + 1]" in top[0].source and top[0].prior > top[-1].prior


def test_block_tuning_respects_the_thread_limit():
    edits = {t.edit for t in tune_constants(src("sgemm_naive"), "sgemm_naive")}
    assert edits == {"BLOCK 16 -> 8", "BLOCK 16 -> 32"}
    big = src("sgemm_naive").replace("#define BLOCK 16", "#define BLOCK 32")
    assert {t.edit for t in tune_constants(big, "sgemm_naive")} == {"BLOCK 32 -> 16"}   # never 64
    # 1-D block of 256: 128 and 512 (<= 1024)
    assert {t.edit for t in tune_constants(src("reduce_sum"), "reduce_sum")} == {"BLOCK 256 -> 128", "BLOCK 256 -> 512"}


@needs_nvcc
def test_const_only_on_pointers_that_are_only_read(builder):
    bare = src("sgemm_naive").replace("const float* A, const float* B", "float* A, float* B")
    (t,) = add_const(bare, "sgemm_naive")
    assert t.edit == "const on A, B"
    assert "const float* A, const float* B, float* C" in t.source
    assert builder.build(t.source, ("-O3",)).ok
    # already const inputs, written output, aliased (softmax y) or atomically updated (reduce out): nothing
    for name in NAMES:
        assert add_const(src(name), name) == []


def test_attempts_already_tried_are_not_proposed_again():
    n = node("sgemm_naive", metrics={"smem_ld_bank_conflicts": 0})
    first = RulesProposer().propose(n, 50, random.Random(0))
    assert "BLOCK 16 -> 32" in {p.edit for p in first}
    tried = NodeView(source=n.source, entry=n.entry, attempts=(
        Attempt("BLOCK 16 -> 32", "ok", speedup=1.3), Attempt("flag -use_fast_math", "wrong_output")))
    again = {p.edit for p in RulesProposer().propose(tried, 50, random.Random(0))}
    assert again and not again & {"BLOCK 16 -> 32", "flag -use_fast_math"}


def test_same_seed_same_proposals_and_priors_order():
    n = node("transpose_naive", resources={"registers": 40})
    runs = [[(p.edit, p.prior) for p in RulesProposer().propose(n, 4, random.Random(7))] for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 4
    priors = [p for _, p in runs[0]]
    assert priors == sorted(priors, reverse=True)
    everything = RulesProposer().propose(n, 100, random.Random(7))
    assert {e for e, _ in runs[0]} <= {p.edit for p in everything}
    assert all(p.proposer == "rules" and p.rationale for p in everything)


def test_register_limited_occupancy_raises_launch_bounds_and_caps():
    plain = {p.edit: p.prior for p in RulesProposer().propose(
        node("sgemm_naive", resources={"registers": 80}), 50, random.Random(0))}
    limited = {p.edit: p.prior for p in RulesProposer().propose(node(
        "sgemm_naive", resources={"registers": 80}, metrics={"occupancy_limiters": "registers"}),
        50, random.Random(0))}
    assert limited["__launch_bounds__(BLOCK * BLOCK)"] > plain["__launch_bounds__(BLOCK * BLOCK)"]
    assert limited["flag -maxrregcount=64"] > plain["flag -maxrregcount=64"]
    assert "flag -maxrregcount=128" not in limited          # not below the current 80 registers
    fast = next(p for p in RulesProposer().propose(node("softmax_rows"), 50, random.Random(0))
                if p.edit == "flag -use_fast_math")
    assert fast.flags == ("-use_fast_math",) and "tolerance" in fast.rationale


def test_block_tuning_is_likelier_only_under_half_occupancy_limited_by_warps_or_blocks():
    def tune_priors(metrics):
        props = RulesProposer().propose(node("sgemm_naive", metrics=metrics), 50, random.Random(0))
        return {p.edit: p.prior for p in props if p.edit.startswith("BLOCK 16 ->")}
    plain = tune_priors({})
    assert tune_priors({"achieved_occupancy_pct": 30.0, "occupancy_limiters": "warps"}) == \
        {e: p * 0.6 / 0.5 for e, p in plain.items()}
    assert tune_priors({"achieved_occupancy_pct": 49.0, "occupancy_limiters": "registers,blocks"}) != plain
    for held in ({"achieved_occupancy_pct": 30.0, "occupancy_limiters": "registers"},
                 {"achieved_occupancy_pct": 50.0, "occupancy_limiters": "warps"}):
        assert tune_priors(held) == plain, held


def test_fast_math_is_less_likely_on_a_memory_bound_kernel():
    """A kernel waiting on memory (memory 80 %, SM 20 %) gains little from faster arithmetic: the
    -use_fast_math prior is cut to 0.3 of its value; on a compute-busy one (SM 70 %) it is not."""
    def fast(metrics):
        return next(p.prior for p in RulesProposer().propose(node("softmax_rows", metrics=metrics), 100,
                                                                random.Random(0)) if p.edit == "flag -use_fast_math")
    plain = fast({})
    assert fast({"memory_throughput_pct": 80.0, "sm_throughput_pct": 20.0}) == pytest.approx(0.3 * plain)
    assert fast({"memory_throughput_pct": 80.0, "sm_throughput_pct": 70.0}) == pytest.approx(plain)
    assert fast({"memory_throughput_pct": 50.0, "sm_throughput_pct": 20.0}) == pytest.approx(plain)


def test_fast_math_only_where_the_code_divides_or_calls_transcendentals():
    """A GEMM's multiply-adds: nothing for -use_fast_math to change; softmax's expf and division: worth a try."""
    from optiml.edits.transforms import fast_math_matters

    edits = lambda ex: {p.edit for p in RulesProposer().propose(node(ex), 100, random.Random(0))}  # noqa: E731
    assert "flag -use_fast_math" not in edits("sgemm_naive") and "flag -use_fast_math" in edits("softmax_rows")
    assert not fast_math_matters("y[i] = a * x[i] + b; // a / b, expf(x)\n/* sqrtf(y) */")
    assert all(fast_math_matters(s) for s in ("y = x / s;", "y /= s;", "y = __expf(x);", "y = rsqrtf(x);",
                                              "y = tanhf(x);", "y = pow(x, 2.0);"))


def test_an_edit_family_that_failed_on_the_path_is_less_likely_below():
    """Two BLOCK changes that failed verification above this node: BLOCK changes are worth 0.4 ** 2 of
    what they were; a flag tried above that gained nothing is not tried again; one that gained is."""
    from optiml.edits.rules import FAILED_FAMILY, family

    assert family("BLOCK 128 -> 256") == family("BLOCK 64 -> 32") == "tune BLOCK" != family("TILE 16 -> 32")
    assert family("flag -maxrregcount=64") == family("flag -maxrregcount=32") == "flag -maxrregcount"
    fresh = {p.edit: p.prior for p in RulesProposer().propose(node("transpose_naive"), 100, random.Random(0))}
    failed = (Attempt("BLOCK_X 16 -> 32", "wrong_output"), Attempt("BLOCK_X 16 -> 8", "launch_error"),
              Attempt("flag -maxrregcount=64", "ok", speedup=1.0))
    taught = {p.edit: p.prior for p in RulesProposer().propose(
        node("transpose_naive", inherited=failed), 100, random.Random(0))}
    tile = [e for e in fresh if e.startswith("BLOCK_X ")]
    assert tile and all(taught[e] == pytest.approx(fresh[e] * FAILED_FAMILY ** 2) for e in tile)
    others = [e for e in fresh if not e.startswith(("BLOCK_X ", "flag"))]
    assert others and all(taught[e] == pytest.approx(fresh[e]) for e in others)
    regs = {p.edit for p in RulesProposer().propose(node("transpose_naive", resources={"registers": 80},
                                                          inherited=failed), 100, random.Random(0))}
    assert not any(e.startswith("flag -maxrregcount") for e in regs)
    gained = (Attempt("flag -maxrregcount=64", "ok", speedup=1.2),)
    regs = {p.edit for p in RulesProposer().propose(node("transpose_naive", resources={"registers": 80},
                                                          inherited=gained), 100, random.Random(0))}
    assert any(e.startswith("flag -maxrregcount") for e in regs)


def test_pragma_unroll_only_on_constant_loops_and_only_once():
    from optiml.edits.transforms import add_pragma_unroll
    (t,) = add_pragma_unroll(src("sgemm_tiled_conflicts"))   # the K-loop over tiles has a runtime bound
    assert "        #pragma unroll\n        for (int k = 0; k < TILE; ++k)" in t.source
    assert add_pragma_unroll(t.source) == []
    assert add_pragma_unroll(src("sgemm_naive")) == []       # k < K: not a compile-time trip count


def test_an_edit_that_failed_to_compile_above_is_not_proposed_again_below():
    fresh = {p.edit for p in RulesProposer().propose(node("transpose_naive"), 100, random.Random(0))}
    some = sorted(e for e in fresh if not e.startswith("BLOCK"))[0]
    below = {p.edit for p in RulesProposer().propose(
        node("transpose_naive", inherited=(Attempt(some, "compile_error", "error: ..."),)), 100, random.Random(0))}
    assert some not in below and below == fresh - {some}


def test_restrict_tried_above_without_gain_is_not_tried_again_below():
    fresh = {p.edit for p in RulesProposer().propose(node("transpose_naive"), 100, random.Random(0))}
    restrict = next(e for e in fresh if e.startswith("__restrict__"))
    flat = {p.edit for p in RulesProposer().propose(
        node("transpose_naive", inherited=(Attempt(restrict, "ok", speedup=1.0),)), 100, random.Random(0))}
    gained = {p.edit for p in RulesProposer().propose(
        node("transpose_naive", inherited=(Attempt(restrict, "ok", speedup=1.2),)), 100, random.Random(0))}
    assert restrict not in flat and restrict in gained


TWO_LOOPS = """__global__ void k(const float* a, float* b) {
    float s = 0.0f, t = 0.0f;
    for (int i = 0; i < 8; i++) s += a[threadIdx.x * 8 + i];
    for (int j = 0; j < 4; j++) t += a[threadIdx.x * 4 + j] * 2.0f;
    b[threadIdx.x] = s + t;
}
"""


def test_a_pragma_without_gain_on_one_loop_does_not_keep_the_other_loops_pragma_away():
    from optiml.edits.transforms import add_pragma_unroll
    first, second = (t.edit for t in add_pragma_unroll(TWO_LOOPS))
    assert first != second
    view = lambda inherited: NodeView(source=TWO_LOOPS, entry="k", inherited=inherited)   # noqa: E731
    below = {p.edit for p in RulesProposer().propose(view((Attempt(first, "ok", speedup=1.0),)), 100, random.Random(0))}
    assert first not in below and second in below


def test_a_constant_whose_value_failed_to_compile_above_may_compile_below():
    fresh = {p.edit for p in RulesProposer().propose(node("transpose_naive"), 100, random.Random(0))}
    tune = next(e for e in sorted(fresh) if e.startswith("BLOCK"))
    below = {p.edit for p in RulesProposer().propose(
        node("transpose_naive", inherited=(Attempt(tune, "compile_error", "static assertion failed"),)), 100,
        random.Random(0))}
    assert tune in below


def test_launch_bounds_without_gain_above_come_back_only_where_registers_limit_occupancy():
    lb = "__launch_bounds__(BLOCK * BLOCK)"
    tried = (Attempt(lb, "ok", speedup=1.0),)
    plain = {p.edit for p in RulesProposer().propose(
        node("sgemm_naive", resources={"registers": 80}, inherited=tried), 50, random.Random(0))}
    limited = {p.edit for p in RulesProposer().propose(node(
        "sgemm_naive", resources={"registers": 80}, metrics={"occupancy_limiters": "registers"}, inherited=tried),
        50, random.Random(0))}
    assert lb not in plain and lb in limited


def test_register_caps_go_down_to_half_the_registers_only():
    from optiml.edits.transforms import flag_variants
    caps = lambda regs: sorted(t.edit for t in flag_variants("__global__ void k() {}", (), regs))   # noqa: E731
    assert caps(255) == ["flag -maxrregcount=128"]
    assert caps(80) == ["flag -maxrregcount=64"]
    assert caps(100) == ["flag -maxrregcount=64"] and caps(40) == ["flag -maxrregcount=32"]


def test_a_kernel_that_cannot_launch_for_its_registers_is_not_proposed():
    """A block times its registers past an SM's 64 K fails at launch and costs a candidate: a block
    tuned up on a register-heavy node is not proposed; a rewrite that failed so from an ancestor is
    not proposed below while the block is as large; launch bounds (ptxas fits the registers) lift both."""
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "bench" / "templates" / "rewrites" / "softmax_long.cu").read_text()
    rules = RulesProposer(launch=(("rows",), (1024,), 0))
    cache = "cache xr[c] in registers across 3 loops, OPTIML_CACHE_ITEMS = 64"
    fail = Attempt(cache, "launch_config_error", "the kernel uses 145 registers a thread, so a block of 1024 "
                                                 "threads needs 155648, more than the 65536 of an SM")
    fresh = NodeView(source=src, entry="softmax_long", resources={"registers": 40})
    below = NodeView(source=src, entry="softmax_long", resources={"registers": 40}, inherited=(fail,))
    assert cache in [p.edit for p in rules.candidates(fresh)]
    assert cache not in [p.edit for p in rules.candidates(below)]
    assert "cache xr[c] in registers across 3 loops, OPTIML_CACHE_ITEMS = 16" in [p.edit for p in rules.candidates(below)]
    bounded = src.replace("__global__ void softmax_long", "__global__ void __launch_bounds__(1024) softmax_long")
    assert cache in [p.edit for p in rules.candidates(NodeView(source=bounded, entry="softmax_long",
                                                                resources={"registers": 40}, inherited=(fail,)))]
    # a smaller block below the failure: the same rewrite may fit now
    knobbed = ("#define OPTIML_BLOCK_SIZE 256\n// optiml:launch {grid = [\"rows\"], block = [\"OPTIML_BLOCK_SIZE\"], "
               "shared_mem = 0}\n" + src.replace("1024", "OPTIML_BLOCK_SIZE"))
    made = [p.edit for p in rules.candidates(NodeView(source=knobbed, entry="softmax_long", resources={"registers": 40},
                                                      inherited=(fail,)))]
    assert cache in made, made                      # the very edit that failed with 1024 threads
    # registers times a tuned-up block past the SM: the move is not proposed; with few registers it is
    half = knobbed.replace("#define OPTIML_BLOCK_SIZE 256", "#define OPTIML_BLOCK_SIZE 512")
    heavy = NodeView(source=half, entry="softmax_long", resources={"registers": 104})
    light = NodeView(source=half, entry="softmax_long", resources={"registers": 32})
    up = lambda v: [p.edit for p in rules.candidates(v) if p.edit.startswith("OPTIML_BLOCK_SIZE 512 -> 1024")]
    assert up(light) and not up(heavy), (up(light), up(heavy))


def test_memory_bound_means_at_least_60_percent_of_the_memory_and_under_40_of_the_sms():
    from optiml.edits.rules import _memory_bound
    assert _memory_bound({"memory_throughput_pct": 60.0, "sm_throughput_pct": 39.9})
    assert not _memory_bound({"memory_throughput_pct": 59.9, "sm_throughput_pct": 10.0})
    assert not _memory_bound({"memory_throughput_pct": 90.0, "sm_throughput_pct": 40.0})
    assert not _memory_bound({"memory_throughput_pct": 90.0})


def test_a_kernel_without_a_readable_block_takes_the_specs_threads_for_the_register_check():
    """No launch line in the source and no block in it to read: the spec's block (256 threads) is
    the one the register check multiplies; with __launch_bounds__ ptxas fits the registers itself."""
    from optiml.edits.rules import _launch_facts

    kernel = "__global__ void k(float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 0.f; }\n"
    assert _launch_facts(kernel, "k", 256) == (False, 256)
    bounded = kernel.replace("__global__ void k", "__global__ void __launch_bounds__(256) k")
    assert _launch_facts(bounded, "k", 256) == (True, None)
