"""One partial a chunk (optiml/edits/partials.py): a block-reduction kernel that writes one partial a
block becomes one whose partials' layout does not depend on its block. The rewrite runs on the CPU
(tests/host_emulation.py: a FAKE GPU for semantics only, a block's threads cooperating for real
under AddressSanitizer) against the kernel it replaces at sizes that are not multiples of the chunk,
with aligned and misaligned arrays, and with the values the tuning gives its constants; it compiles
with nvcc for sm_90, the rules offer it, and it refuses what it cannot keep right, saying why."""
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from optiml import expr
from optiml.edits.partials import chunk_partials
from optiml.edits.transforms import all_transforms
from optiml.source import parse_source
from tests.host_emulation import GXX, run_on_host

NVCC = shutil.which("nvcc")
LAUNCH = (("cdiv(n, 256)",), (256,), 0)
PARTIAL = """__global__ void partial_sums(const float *x, float *partial, int n) {
  __shared__ float sh[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  sh[t] = (i < n) ? x[i] : 0.0f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (t < s) sh[t] += sh[t + s]; __syncthreads(); }
  if (t == 0) partial[blockIdx.x] = sh[0];
}
"""
# the same sum of squares written otherwise: an if/else load, the tree's literal start, s /= 2,
# threadIdx.x for the first thread
SQUARES = """__global__ void partial_sums(const float *x, float *partial, int n) {
    __shared__ float sh[256];
    unsigned int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) sh[tid] = x[i] * x[i];
    else sh[tid] = 0;
    __syncthreads();
    for (unsigned int s = 128; s > 0; s /= 2) {
        if (tid < s) {
            sh[tid] += sh[tid + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
"""


def _launch(source: str, sizes: dict):
    """The grid and block of ``source`` (its own launch line, else LAUNCH) at ``sizes``."""
    info = parse_source(source)
    grid, block, _ = LAUNCH if info.launch is None else info.launch.over(*LAUNCH)
    env = dict(sizes, **info.constants)
    return tuple(int(expr.evaluate(str(g), env)) for g in grid), tuple(int(expr.evaluate(str(b), env)) for b in block)


def _x(n: int) -> np.ndarray:
    """x as tests/host_emulation.py fills it (the first array's pattern), in float32."""
    j = np.arange(n)
    return (((j * 37 + 11) % 101) / 25.0 - 2.0).astype(np.float32)


def _want(n: int, term=lambda v: v) -> list[float]:
    """The partials of 256 that the first kernel computes, exactly (float64)."""
    v = term(_x(n).astype(np.float64))
    return [float(v[k:k + 256].sum()) for k in range(0, n, 256)]


def _partials(lines: list[str]) -> list[float]:
    return [float.fromhex(v) for v in lines[1].split()]


def _close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(got, want))


def _job(tmp, tag, source, n, offsets=(0, 1)):
    grid, block = _launch(source, {"n": n})
    return lambda: run_on_host(tmp, tag, source, "partial_sums", {"x": n, "partial": -(-n // 256)}, {"n": n},
                               grid, block, ("partial",), offsets, threaded=True)


def _rewrite(source: str = PARTIAL, launch=LAUNCH) -> str:
    ts, why = chunk_partials(source, "partial_sums", launch)
    assert why is None and len(ts) == 1 and ts[0].kind == "partials"
    return ts[0].source


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every emulation of this file at once (each compiles for about a second): name -> per offset, the arrays."""
    if GXX is None:
        pytest.skip("g++ is not installed")
    tmp = tmp_path_factory.mktemp("partials")
    out = _rewrite()
    # the vector loop's terms dropped: what the whole aligned chunks sum shows which loop ran
    no_vector = re.sub(r"\n *optiml_acc \+= \(float\)\(optiml_x\.[xyzw]\);", "", out)
    assert "optiml_x." not in no_vector and "float4 optiml_x =" in no_vector     # the load stays, its terms go
    tuned = {f"{t}x{c}": out.replace("OPTIML_PARTIAL_THREADS 32", f"OPTIML_PARTIAL_THREADS {t}")
             .replace("OPTIML_PARTIAL_CHUNKS_PER_BLOCK 8", f"OPTIML_PARTIAL_CHUNKS_PER_BLOCK {c}")
             for t, c in ((64, 4), (4, 2))}
    jobs = {"first": _job(tmp, "first", PARTIAL, 5003, (0,)), "rewrite": _job(tmp, "rewrite", out, 5003),
            "small": _job(tmp, "small", out, 77), "squares": _job(tmp, "squares", _rewrite(SQUARES), 1100),
            "no_vector": _job(tmp, "no_vector", no_vector, 1100),
            **{k: _job(tmp, k, src, 1100, (1,)) for k, src in tuned.items()}}
    with ThreadPoolExecutor(2) as pool:
        futures = {k: pool.submit(f) for k, f in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def test_the_chunked_partials_sum_what_the_first_kernel_sums(runs):
    first = _partials(runs["first"][0])
    assert _close(first, _want(5003)) and len(first) == 20          # the reference below is the first kernel's
    for offset in (0, 1):                                           # x aligned (float4 loads), then not (scalar)
        got = _partials(runs["rewrite"][offset])
        assert _close(got, first), (offset, got[-3:], first[-3:])
        assert runs["rewrite"][offset][0] == runs["first"][0][0]    # x untouched
    assert _close(_partials(runs["small"][0]), _want(77)) and _close(_partials(runs["small"][1]), _want(77))


def test_the_launch_is_made_of_the_chunk_and_two_tuned_constants():
    out = _rewrite()
    launch = parse_source(out).launch
    assert launch.grid == ("cdiv(cdiv(n, 256), OPTIML_PARTIAL_CHUNKS_PER_BLOCK)",)
    assert launch.block == ("OPTIML_PARTIAL_CHUNKS_PER_BLOCK * OPTIML_PARTIAL_THREADS",)
    assert "#define OPTIML_PARTIAL_CHUNK 256\n#define OPTIML_PARTIAL_THREADS 32\n" \
           "#define OPTIML_PARTIAL_CHUNKS_PER_BLOCK 8\n" in out
    assert _launch(out, {"n": 5003}) == ((3,), (256,)) and _launch(out, {"n": 77}) == ((1,), (256,))
    assert "__shared__ float sh" not in out and "partial[optiml_chunk] = optiml_acc;" in out


@pytest.mark.parametrize("declared,kept", [("long long", "long long"), ("const unsigned", "unsigned"),
                                            ("volatile size_t", "size_t")])
def test_the_index_keeps_its_type_in_the_rewrite(declared, kept):
    """A wide or unsigned index stays so in the chunked loop (its qualifiers dropped: the rewrite
    declares it const itself)."""
    source = PARTIAL.replace("int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;",
                             f"int t = threadIdx.x; {declared} i = blockIdx.x * blockDim.x + t;")
    assert f"const {kept} i = ({kept})(optiml_base + optiml_k);" in _rewrite(source)


def test_an_expression_of_x_written_otherwise_is_summed_too(runs):
    assert "optiml_acc += (float)(optiml_x.y * optiml_x.y);" in _rewrite(SQUARES)
    for offset in (0, 1):
        assert _close(_partials(runs["squares"][offset]), _want(1100, lambda v: v * v))


def test_float4_loads_on_aligned_whole_chunks_and_scalar_loads_elsewhere(runs):
    # without the vector loop's terms: aligned, the whole chunks sum to nothing and the last (partial)
    # one is still right; misaligned by one float, every chunk takes the scalar loop and is right
    aligned, misaligned, want = _partials(runs["no_vector"][0]), _partials(runs["no_vector"][1]), _want(1100)
    assert aligned[:4] == [0.0] * 4 and _close(aligned[4:], want[4:])
    assert _close(misaligned, want)


@pytest.mark.parametrize("tuned", ["64x4", "4x2"], ids=["a_group_wider_than_a_warp", "a_block_smaller_than_a_warp"])
def test_every_value_the_tuning_gives_the_constants_sums_the_same(runs, tuned):
    assert _close(_partials(runs[tuned][0]), _want(1100))


def test_the_rules_offer_it_and_on_the_rewrite_only_moves_that_keep_the_layout(tmp_path):
    assert any(t.kind == "partials" for t in all_transforms(PARTIAL, "partial_sums", launch=LAUNCH))
    out = _rewrite()
    moves = {t.edit for t in all_transforms(out, "partial_sums", launch=LAUNCH) if t.kind in ("tune", "knob")}
    assert moves == {"OPTIML_PARTIAL_THREADS 32 -> 16", "OPTIML_PARTIAL_THREADS 32 -> 64",
                     "OPTIML_PARTIAL_CHUNKS_PER_BLOCK 8 -> 4", "OPTIML_PARTIAL_CHUNKS_PER_BLOCK 8 -> 16"}
    # a block the user named (no knob is offered on such a kernel: its block is the partials' layout):
    # the chunk stays 256 and the name, now unused, is dropped
    from optiml.edits.structural import tie_block_literal
    assert tie_block_literal(PARTIAL, "partial_sums", LAUNCH)[0] == []
    named = ("#define BLOCK_SIZE 256\n// optiml:launch {grid = [\"cdiv(n, BLOCK_SIZE)\"], block = [\"BLOCK_SIZE\"]}\n"
             + PARTIAL.replace("sh[256]", "sh[BLOCK_SIZE]"))
    chained = _rewrite(named)
    assert "BLOCK_SIZE" not in chained.replace("OPTIML_", "") and \
        parse_source(chained).launch.grid[0].startswith("cdiv(cdiv(n, 256)")
    # a term that uses the index as a number has no float4 loop (its lanes could not say which element)
    ramp = _rewrite(PARTIAL.replace("x[i] : 0.0f", "x[i] + 0.5f * i : 0.0f"))
    assert "float4" not in ramp and "optiml_acc += (float)(x[i] + 0.5f * i);" in ramp
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    for name, src in (("k", out), ("sq", _rewrite(SQUARES)), ("w64", out.replace("THREADS 32", "THREADS 64")),
                      ("ramp", ramp)):
        f = tmp_path / f"{name}.cu"
        f.write_text(src)
        r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / f"{name}.cubin"), str(f)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


TWO_OUT = PARTIAL.replace("float *partial, int n", "float *partial, int *seen, int n").replace(
    "if (t == 0) partial[blockIdx.x] = sh[0];", "if (t == 0) partial[blockIdx.x] = sh[0];\n  seen[blockIdx.x] = 1;")


@pytest.mark.parametrize("source, launch, why", [
    (PARTIAL.replace("if (t == 0) partial[blockIdx.x] = sh[0];", "if (t == 0) atomicAdd(partial, sh[0]);"), LAUNCH,
     "not chunked: the block's sum leaves through an atomic into one value (the accumulation rewrite's case), "
     "not as one partial a block"),
    (PARTIAL.replace("sh[t] += sh[t + s];", "sh[t] = fmaxf(sh[t], sh[t + s]);"), LAUNCH,
     "not chunked: the tree's step if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]); is not "
     "`if (t < s) sh[t] += sh[t + s];` (a sum)"),
    (TWO_OUT, LAUNCH, "not chunked: the kernel writes a second output (partial, seen), not only one partial a block"),
    (PARTIAL.replace("partial[blockIdx.x] = sh[0]", "partial[blockIdx.x + 1] = sh[0]"), LAUNCH,
     "not chunked: the partial is written at partial[blockIdx.x+1], not at [blockIdx.x]"),
    (PARTIAL.replace("__shared__ float sh[256];", "extern __shared__ float sh[];"), (("cdiv(n, 256)",), (256,), "smem"),
     "not chunked: the dynamic shared memory's size smem cannot be read"),
    (PARTIAL, (("cdiv(n, 256)", "4"), (256,), 0), "not chunked: the launch is not 1-D (grid ['cdiv(n, 256)', '4'], block [256])"),
    (PARTIAL.replace("sh[256]", "sh[100]"), (("cdiv(n, 100)",), (100,), 0),
     "not chunked: the block 100 is not a power of two the rewrite can read, so the tree's partial is not known to "
     "sum the whole block"),
    (PARTIAL, (("4096",), (256,), 0), "not chunked: the grid 4096 is not cdiv(X, 256), so the number of partials is not known"),
    (PARTIAL.replace("int s = blockDim.x / 2", "int s = 64"), LAUNCH, "not chunked: the tree starts at 64, not at half the block (128)"),
    ("#define HALF 128\n#define QUARTER 64\n" + PARTIAL.replace("int s = blockDim.x / 2", "int s = QUARTER"), LAUNCH,
     "not chunked: the tree starts at QUARTER, not at half the block (128)"),
    (PARTIAL.replace("x[i] : 0.0f", "x[i] * t : 0.0f"), LAUNCH,
     "not chunked: the loaded term uses t, not only the element's index and the kernel's arguments"),
    (PARTIAL.replace("__syncthreads();\n  for", "sh[t] *= 2.0f;\n  __syncthreads();\n  for"), LAUNCH,
     "not chunked: the kernel does more than load one element a thread, sync, reduce with a tree and write one partial"),
    (PARTIAL, (("cdiv(n * m2, 256)",), (256,), 0),
     "not chunked: the grid's n * m2 is not made of the kernel's scalars and constants, so the kernel cannot tell "
     "how many partials to write"),
    (PARTIAL.replace("int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;",
                     "int t = threadIdx.x, i = blockIdx.x * blockDim.x + t, k = 3;"), LAUNCH,
     "not chunked: the kernel declares k = 3, not only the thread's index and its element's"),
    (PARTIAL.replace("__syncthreads();\n  for", "__syncwarp();\n  for"), LAUNCH,
     "not chunked: the load is followed by __syncwarp();, not a barrier"),
    (PARTIAL.replace("(i < n) ?", "(i < n && i > 4) ?"), LAUNCH,
     "not chunked: the load's bound n && i > 4 is not one comparison with the kernel's scalars"),
    (PARTIAL.replace("x[i] : 0.0f", "x[i] * __syncthreads_count(1) : 0.0f"), LAUNCH,
     "not chunked: the loaded term synchronises or is atomic"),
    (PARTIAL.replace("x[i] : 0.0f", "(n = 2) * x[i] : 0.0f"), LAUNCH,
     "not chunked: the loaded term (n = 2) * x[i] changes a value"),
    (PARTIAL.replace("x[i] : 0.0f", "x[i] + partial[0] : 0.0f"), LAUNCH, "not chunked: the loaded term reads partial"),
    (PARTIAL.replace("__shared__ float sh[256];", "__shared__ float2 sh[256];"), LAUNCH,
     "not chunked: the shared array sh holds float2, not a number type"),
])
def test_what_it_cannot_keep_right_it_refuses_with_the_reason(source, launch, why):
    assert chunk_partials(source, "partial_sums", launch) == ([], why)


def test_dynamic_shared_memory_of_a_readable_size_is_taken_and_other_kernels_are_left_alone():
    dynamic = PARTIAL.replace("__shared__ float sh[256];", "extern __shared__ float sh[];")
    assert chunk_partials(dynamic, "partial_sums", (("cdiv(n, 256)",), (256,), 1024))[0]
    assert chunk_partials(dynamic, "partial_sums", (("cdiv(n, 256)",), (256,), 512))[1] == \
        "not chunked: the dynamic shared memory (512 bytes) holds fewer than the block's 256 elements"
    scale = """__global__ void scale(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
"""
    assert chunk_partials(scale, "scale", LAUNCH) == ([], None)
    assert chunk_partials(PARTIAL, "partial_sums", None) == ([], None)


def test_a_tree_starting_at_a_constant_worth_half_the_block_is_taken():
    named = "#define HALF 128\n" + PARTIAL.replace("int s = blockDim.x / 2", "int s = HALF")
    rewrites, why = chunk_partials(named, "partial_sums", LAUNCH)
    assert rewrites and why is None
