"""The rewrites of reductions and re-reads: accumulate before a block reduction, a
warp-shuffle tail for a shared-memory tree, and registers that keep what several loops re-read.
Each on kernels it must transform (the variant compiles with nvcc for sm_90, and says what it did)
and kernels it must refuse (saying why where it looked applicable). Whether the variants compute
the same answers is checked on the GPU (tests/gpu/test_gpu_rewrites.py)."""
import re
import shutil
import subprocess

import pytest

from optiml.edits.reductions import accumulate_first, warp_shuffle
from optiml.edits.reuse import cache_rereads
from optiml.edits.rules import RulesProposer
from optiml.edits.types import NodeView
from optiml.search import MCTS, SearchConfig
from optiml.source import parse_source

NVCC = shutil.which("nvcc")

BLOCK_SUM = """__global__ void block_sum(const float *x, float *out, int n) {
    __shared__ float sh[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    sh[t] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, sh[0]);
}
"""
LAUNCH = (("cdiv(n, 256)",), (256,), 0)

RMSNORM = """__global__ void rms(const float *x, float *y, int rows, int f, int sp, float eps) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * sp) return;
    const float *xc = x + (size_t)(idx / sp) * f * sp + idx % sp;
    float *yc = y + (size_t)(idx / sp) * f * sp + idx % sp;
    float ss = 0.0f;
    for (int k = 0; k < f; k++) {
        float v = xc[(size_t)k * sp];
        ss += v * v;
    }
    float r = rsqrtf(ss / f + eps);
    for (int k = 0; k < f; k++) yc[(size_t)k * sp] = xc[(size_t)k * sp] * r;
}
"""


def build(tmp_path, source: str) -> str:
    """ptxas's report for ``source`` (sm_90); fails the test when nvcc does."""
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    f = tmp_path / "k.cu"
    f.write_text(source)
    r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr


# -- accumulate before the block reduction --------------------------------------------------------
def test_a_one_element_block_sum_accumulates_first_and_launches_fewer_blocks(tmp_path):
    ts, why = accumulate_first(BLOCK_SUM, "block_sum", LAUNCH)
    assert why is None and len(ts) == 1
    out = ts[0].source
    assert re.search(r"for \(size_t optiml_j = \(size_t\)\(i\); optiml_j < \(size_t\)\(n\); "
                     r"optiml_j \+= \(size_t\)blockDim.x \* gridDim.x\)\s+optiml_acc \+= x\[optiml_j\];", out)
    assert "sh[t] = optiml_acc;" in out and "? x[i]" not in out
    assert parse_source(out).launch.grid == ("cdiv(n, (256) * OPTIML_ITEMS_PER_THREAD)",)
    assert "#define OPTIML_ITEMS_PER_THREAD 16" in out
    build(tmp_path, out)


def test_a_loaded_value_kept_in_a_variable_first_accumulates_too(tmp_path):
    src = BLOCK_SUM.replace("sh[t] = (i < n) ? x[i] : 0.0f;", "float v = (i < n) ? x[i] * x[i] : 0.f;\n    sh[t] = v;")
    ts, why = accumulate_first(src, "block_sum", LAUNCH)
    assert why is None and len(ts) == 1
    assert "optiml_acc += x[optiml_j] * x[optiml_j];" in ts[0].source
    assert "float v = optiml_acc;" in ts[0].source
    build(tmp_path, ts[0].source)
    # a loaded value that is not what the shared array is given (scaled on the way): no accumulation
    scaled = src.replace("sh[t] = v;", "sh[t] = 2.f * v;")
    assert accumulate_first(scaled, "block_sum", LAUNCH) == ([], None)


@pytest.mark.parametrize("change, reason", [
    (("atomicAdd(out, sh[0])", "atomicMax((int *)out, __float_as_int(sh[0]))"), "one atomicAdd"),
    (("if (t < s) sh[t] += sh[t + s];", "if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);"), "not a sum"),
    (("if (t == 0) atomicAdd(out, sh[0]);", "if (t == 0) atomicAdd(out, sh[0]);\n    if (i < n) out[1 + i] = 0.f;"),
     "beyond the one load"),
])
def test_what_is_not_a_block_sum_is_refused_with_the_reason(change, reason):
    ts, why = accumulate_first(BLOCK_SUM.replace(*change), "block_sum", LAUNCH)
    assert ts == [] and why is not None and reason in why


@pytest.mark.parametrize("change, why", [
    (("(i < n) ?", "(i < n && n > 0) ?"), "not accumulated: the load's bound is more than one comparison"),
    (("    sh[t] = (i < n) ? x[i] : 0.0f;", "    if (n > 0) { sh[t] = (i < n) ? x[i] : 0.0f; }"),
     "not accumulated: the load is not a statement of the kernel's own body"),
    (("x[i] : 0.0f", "x[i] * __syncthreads_count(1) : 0.0f"), "not accumulated: the loaded expression synchronises or is atomic"),
    (("__shared__ float sh[256];", "__shared__ half sh[256];"), "not accumulated: the shared array holds half, not a number type"),
    (("    __syncthreads();\n    for", "    sh[t]++;\n    __syncthreads();\n    for"), "not accumulated: sh is incremented elsewhere"),
    (("const float *x, float *out, int n", "const float *x, float *out, float *seen, int n"),
     None),
    (("if (t == 0) atomicAdd(out, sh[0]);", "if (t == 0) atomicAdd(out, sh[0]);\n    if (t == 1) seen[blockIdx.x] = 1.0f;"),
     "not accumulated: the kernel also writes seen, which a grid-stride sum would change"),
])
def test_each_refusal_of_the_accumulation_says_its_own_reason(change, why):
    source = BLOCK_SUM.replace("const float *x, float *out, int n", "const float *x, float *out, float *seen, int n")
    ts, said = accumulate_first(source.replace(*change), "block_sum", LAUNCH)
    if why is None:                         # the extra parameter alone changes nothing
        assert len(ts) == 1 and said is None
    else:
        assert ts == [] and said == why


@pytest.mark.parametrize("index", ["blockIdx.x * 256 + threadIdx.x", "threadIdx.x + (int)blockIdx.x * (256)",
                                   "256 * blockIdx.x + threadIdx.x"])
def test_a_one_item_index_written_with_the_launchs_block_accumulates_too(index):
    """The launch's block (256) written in place of blockDim.x, in any of the orders: the same index."""
    src = BLOCK_SUM.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;", f"int i = {index};")
    ts, why = accumulate_first(src, "block_sum", LAUNCH)
    assert why is None and len(ts) == 1 and "optiml_acc += x[optiml_j];" in ts[0].source
    # the same index with another launch's block is no one-item index there
    assert accumulate_first(src, "block_sum", (("cdiv(n, 128)",), (128,), 0)) == ([], None)


def test_an_accumulation_needs_a_cdiv_grid_and_a_one_item_index():
    assert accumulate_first(BLOCK_SUM, "block_sum", (("4096",), (256,), 0)) == ([], None)
    strided = BLOCK_SUM.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;", "int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);")
    assert accumulate_first(strided, "block_sum", LAUNCH) == ([], None)


# -- a warp-shuffle tail -------------------------------------------------------------------------
def test_the_tree_ends_in_one_warp_with_shuffles(tmp_path):
    ts, why = warp_shuffle(BLOCK_SUM, "block_sum", LAUNCH)
    assert why is None and len(ts) == 1
    out = ts[0].source
    assert "for (int s = 128; s > 32; s >>= 1)" in out
    assert "__shfl_down_sync(0xffffffffu, optiml_v, optiml_o)" in out and "if (t == 0) sh[0] = optiml_v;" in out
    assert out.index("if (t == 0) sh[0] = optiml_v;") < out.index("__syncthreads();\n    if (t == 0) atomicAdd")
    build(tmp_path, out)


def test_a_shuffle_tail_on_a_named_block_is_checked_at_compile_time(tmp_path):
    named = "#define B 256\n" + BLOCK_SUM.replace("sh[256]", "sh[B]").replace("int s = 128", "int s = B / 2")
    ts, _ = warp_shuffle(named, "block_sum", (("cdiv(n, B)",), ("B",), 0))
    assert ts and "static_assert((B) >= 64" in ts[0].source
    build(tmp_path, ts[0].source)
    if NVCC is not None:          # a block of 32 would read past the tree: nvcc refuses it
        f = tmp_path / "k32.cu"
        f.write_text(ts[0].source.replace("#define B 256", "#define B 32"))
        r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k32.cubin"), str(f)],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "warp-shuffle tail" in r.stderr


@pytest.mark.parametrize("start, block", [("blockDim.x / 2", 256), ("(blockDim.x / 2)", 256),
                                          ("blockDim.x >> 1", 256), ("128", 256), ("64", 128)],
                         ids=["half_the_block", "in_parentheses", "shifted", "a_literal", "the_launchs_half"])
def test_a_tree_from_half_a_literal_block_is_shuffled_at_that_block(tmp_path, start, block):
    """The tree's start read against the spec's literal block: half of it, however written."""
    src = BLOCK_SUM.replace("int s = 128", f"int s = {start}").replace("sh[256]", f"sh[{block}]")
    ts, why = warp_shuffle(src, "block_sum", ((f"cdiv(n, {block})",), (block,), 0))
    assert why is None and len(ts) == 1 and f"static_assert(({block}) >= 64" in ts[0].source, ts[0].source[:400]
    other = warp_shuffle(BLOCK_SUM.replace("int s = 128", "int s = 64"), "block_sum", LAUNCH)   # a quarter: not known
    assert other[0] == []


def test_a_tree_that_is_not_a_guarded_add_is_not_shuffled():
    maxtree = BLOCK_SUM.replace("if (t < s) sh[t] += sh[t + s];", "if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);")
    ts, why = warp_shuffle(maxtree, "block_sum", LAUNCH)
    assert ts == [] and "not `if (t < s) sh[t] += sh[t + s];`" in why
    unknown = BLOCK_SUM.replace("int s = 128", "int s = blockDim.x / 2")
    ts, why = warp_shuffle(unknown, "block_sum", (("cdiv(n, BS)",), ("BS",), 0))
    assert ts == [] and "not known at compile time" in why


# -- registers for what several loops re-read ---------------------------------------------------
def test_a_norm_reads_its_column_once_and_keeps_it_in_registers(tmp_path):
    ts, why = cache_rereads(RMSNORM, "rms")
    assert why is None and [t.edit[-23:] for t in ts] == ["OPTIML_CACHE_ITEMS = 16", "OPTIML_CACHE_ITEMS = 64"]
    out = ts[0].source
    assert out.startswith("#define OPTIML_CACHE_ITEMS 16\n")
    assert out.count("#pragma unroll") == 2 and "float optiml_cache[OPTIML_CACHE_ITEMS];" in out
    assert "optiml_cache[optiml_u] = xc[(size_t)k * sp];" in out
    assert "yc[(size_t)k * sp] = optiml_cache[optiml_u] * r;" in out
    # past the cache, each loop goes on as it was
    assert "for (int k = (0) + OPTIML_CACHE_ITEMS * (1); k < f; k += 1) yc[(size_t)k * sp] = xc[(size_t)k * sp] * r;" in out
    report = build(tmp_path, out)
    assert "0 bytes stack frame" in report          # unrolled: the cache is registers, not local memory
    assert "0 bytes stack frame" in build(tmp_path, ts[1].source)
    # the size is a name the tuning moves
    from optiml.edits.transforms import tune_constants
    assert {t.edit for t in tune_constants(out, "rms")} == {"OPTIML_CACHE_ITEMS 16 -> 8", "OPTIML_CACHE_ITEMS 16 -> 32"}


def test_a_three_pass_softmax_keeps_its_row_for_the_later_passes(tmp_path):
    from .test_edits_knobs import SOFTMAX
    ts, why = cache_rereads(SOFTMAX, "softmax")
    assert why is None and ts and "across 3 loops" not in ts[0].edit   # the first loop steps by 1024, the others by blockDim.x
    # the two blockDim.x loops share their header: the second reads the cache
    assert "sum += expf(optiml_cache[optiml_u] - m);" in ts[0].source
    build(tmp_path, ts[0].source)


@pytest.mark.parametrize("change, reason", [
    (("float r = rsqrtf(ss / f + eps);", "float r = rsqrtf(ss / f + eps);\n    sp = sp + 0;"), "sp changes"),
    (("ss += v * v;", "ss += v * v;\n        __syncthreads();"), "synchronises"),
    (("ss += v * v;", "ss += v * v;\n        if (ss > 1e30f) break;"), "leaves the loop"),
])
def test_loops_whose_reads_may_differ_are_not_cached(change, reason):
    ts, why = cache_rereads(RMSNORM.replace(*change), "rms")
    assert ts == [] and why is not None and reason in why, why


def test_a_written_array_or_different_loops_are_left_alone():
    writable = RMSNORM.replace("const float *xc", "float *xc")
    assert cache_rereads(writable, "rms") == ([], None)
    other = RMSNORM.replace("for (int k = 0; k < f; k++) yc", "for (int k = 1; k < f; k++) yc")
    assert cache_rereads(other, "rms") == ([], None)


# -- the rules proposer: priors from the profile, refusals recorded ------------------------------
def test_the_rules_propose_the_accumulation_first_on_a_one_element_block_sum():
    props = RulesProposer(launch=LAUNCH).propose(NodeView(source=BLOCK_SUM, entry="block_sum"), 1, __import__("random").Random(0))
    assert props[0].edit.startswith("accumulate")


def test_barrier_stalls_in_the_profile_raise_the_reduction_rewrites_and_say_so():
    node = NodeView(source=BLOCK_SUM, entry="block_sum", metrics={"stall_barrier": 2.5, "dram_throughput_pct": 30.0})
    plain = {p.edit: p for p in RulesProposer(launch=LAUNCH).candidates(NodeView(source=BLOCK_SUM, entry="block_sum"))}
    hot = {p.edit: p for p in RulesProposer(launch=LAUNCH).candidates(node)}
    acc = next(e for e in hot if e.startswith("accumulate"))
    assert hot[acc].prior > plain[acc].prior
    assert "2.50 warps per issue cycle stalled at barriers" in hot[acc].rationale
    assert "The profile shows" not in plain[acc].rationale


class _Fake:
    """A fake evaluator: every source verifies, at 10 ms."""

    def evaluate(self, source, flags):
        return {"status": "ok", "median_ms": 10.0, "spread": 0.01, "metrics": {}, "diagnosis": []}


def test_a_refused_rewrite_is_recorded_once_outside_the_proposals_asked_for():
    maxtree = BLOCK_SUM.replace("if (t < s) sh[t] += sh[t + s];", "if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);")
    m = MCTS(maxtree, _Fake(), RulesProposer(launch=LAUNCH), config=SearchConfig(budget=6, k_w=1.0), entry="block_sum")
    m.run()
    refused = [(n.id, a) for n in m.nodes for a in n.tried if getattr(a, "status", None) == "refused"]
    edits = [a.edit for _, a in refused]
    assert "accumulate: refused" in edits and "shuffle: refused" in edits
    assert all(nid == m.root.id for nid, _ in refused)        # said where it first held, not at every child
    assert len(edits) == len(set(edits))
    assert m.evaluations == 6                                  # the budget went to candidates


class _Scripted:
    """A fake proposer: two candidates and one refusal at every call."""
    name = "scripted"

    def propose(self, node, k, rng):
        from optiml.edits.types import Proposal
        return [Proposal(source=node.source, flags=(), edit="x: refused", rationale="no", refused="no", prior=0.0)] + \
               [Proposal(source=node.source + f"\n__device__ int v{i}_{len(node.source)};", flags=(), edit=f"v{i}", rationale="",
                         prior=1.0 - i / 10) for i in range(2)]


def test_refusals_do_not_take_the_places_of_the_candidates_asked_for():
    m = MCTS(BLOCK_SUM, _Fake(), _Scripted(), config=SearchConfig(budget=2, k_w=1.0), entry="block_sum")
    m.run()
    assert m.root.children and m.root.children[0].edit == "v0"
    assert any(a.edit == "x: refused" and a.status == "refused" for a in m.root.tried)


def test_a_rewrite_that_keeps_failing_verification_stops_being_proposed_there():
    from optiml.edits.rules import GIVE_UP, prior
    from optiml.edits.transforms import Transform
    from optiml.edits.types import Attempt
    t = Transform("accumulate", BLOCK_SUM + "//", "accumulate OPTIML_ITEMS_PER_THREAD = 16 before the block reduction", "")
    fail = Attempt(edit=t.edit, status="wrong_output")
    assert prior(t, NodeView(source=BLOCK_SUM, inherited=(fail,) * (GIVE_UP - 1))) > 0
    assert prior(t, NodeView(source=BLOCK_SUM, inherited=(fail,) * GIVE_UP)) is None


def test_show_counts_each_rewrite_and_says_what_was_refused(tmp_path):
    from optiml.app.records import StoreObserver
    from optiml.traces.report import format_path
    from optiml.traces.store import TraceStore

    class Halving:
        """A fake evaluator: 10 ms, 5 ms once the block sum accumulates first."""

        def evaluate(self, source, flags):
            return {"status": "ok", "median_ms": 5.0 if "optiml_acc" in source else 10.0, "spread": 0.01,
                    "metrics": {}, "diagnosis": []}

    maxtree = BLOCK_SUM.replace("if (t < s) sh[t] += sh[t + s];", "if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]) + 0.0f;")
    store = TraceStore(tmp_path / "t.db")
    run = store.start_run("block_sum")
    m = MCTS(BLOCK_SUM, Halving(), RulesProposer(launch=LAUNCH), config=SearchConfig(budget=6, k_w=1.0),
             observer=StoreObserver(store, run), entry="block_sum")
    m.run()
    text = format_path(store, run)
    assert "rewrites:" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("accumulate:"))
    assert "1 made, 1 verified" in line and "best 2.00x over the kernel it rewrote" in line
    # a kernel whose tree is not a sum: the accumulation is refused, and show says why
    store2 = TraceStore(tmp_path / "u.db")
    run2 = store2.start_run("block_sum")
    m2 = MCTS(maxtree, Halving(), RulesProposer(launch=LAUNCH), config=SearchConfig(budget=3, k_w=1.0),
              observer=StoreObserver(store2, run2), entry="block_sum")
    m2.run()
    text2 = format_path(store2, run2)
    assert "  accumulate: refused not accumulated:" in text2 and "is not a sum" in text2
