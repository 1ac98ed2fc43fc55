"""Privatized atomics (optiml/edits/atomics.py): a histogram's global atomics made per-block copies
in shared memory, merged once a block, and its variant that reads bytes 16 at a time. The rewrite
runs on the CPU (tests/host_emulation.py: a FAKE GPU for semantics only, threads cooperating for real
under AddressSanitizer) against the kernel it replaces, compiles with nvcc for sm_90, and refuses
what it cannot keep right, saying why."""
import math
import re
import shutil
import subprocess

import pytest

from optiml import expr
from optiml.edits.atomics import privatize_atomics
from optiml.edits.transforms import all_transforms
from optiml.source import parse_source
from tests.host_emulation import GXX, run_on_host

NVCC = shutil.which("nvcc")
LAUNCH = (("cdiv(n, 128)",), (128,), 0)
HIST = """__global__ void histogram(const unsigned int *keys, unsigned int *counts, int n, int bins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int k = keys[i] % bins;
    atomicAdd(&counts[k], 1u);
  }
}
"""
# bytes into 256 bins by a mask, a float weight added, the guard as an early return
WEIGHTED = """__global__ void weighted(const unsigned int *keys, const float *w, float *sums, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(sums + (keys[i] & 0xff), w[i] * 0.5f);
}
"""


def _launch(source: str, sizes: dict):
    """The grid and block of ``source`` (its own launch line, else LAUNCH) at ``sizes``."""
    info = parse_source(source)
    grid, block, _ = LAUNCH if info.launch is None else info.launch.over(*LAUNCH)
    env = dict(sizes, **info.constants)
    return tuple(int(expr.evaluate(str(g), env)) for g in grid), tuple(int(expr.evaluate(str(b), env)) for b in block)


def _run(tmp, tag, source, entry, counts, scalars, outs, poisoned=()):
    grid, block = _launch(source, scalars)
    return run_on_host(tmp, tag, source, entry, counts, scalars, grid, block, poisoned, (0,), threaded=True)[0]


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("n, bins", [(5003, 37), (3001, 4099)], ids=["copy", "too_many_bins_for_the_copy"])
def test_the_privatized_histogram_counts_what_the_kernel_counts(tmp_path, n, bins):
    (t,), why = privatize_atomics(HIST, "histogram", LAUNCH)
    assert why is None and "OPTIML_PRIV_BLOCKS" in t.edit
    assert _launch(t.source, {"n": n})[0][0] == min(math.ceil(n / 128), 1024)
    counts = {"keys": n, "counts": bins}
    scalars = {"n": n, "bins": bins}
    want = _run(tmp_path, "orig", HIST, "histogram", counts, scalars, ("counts",))
    got = _run(tmp_path, "priv", t.source, "histogram", counts, scalars, ("counts",))
    assert got == want
    assert sum(int(v) for v in got[1].split()) - sum(int(v) for v in want[1].split()) == 0


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_a_weighted_histogram_by_mask_with_an_early_return(tmp_path):
    (t,), why = privatize_atomics(WEIGHTED, "weighted", LAUNCH)
    assert why is None and "#define OPTIML_PRIV_CAP 256" in t.source
    # a grid of fewer blocks than the items need: each thread loops
    few = t.source.replace("#define OPTIML_PRIV_BLOCKS 1024", "#define OPTIML_PRIV_BLOCKS 3")
    n = 2000
    counts, scalars = {"keys": n, "w": n, "sums": 256}, {"n": n}
    want = _run(tmp_path, "orig", WEIGHTED, "weighted", counts, scalars, ("sums",))
    got = _run(tmp_path, "priv", few, "weighted", counts, scalars, ("sums",))
    w, g = [float.fromhex(v) for v in want[2].split()], [float.fromhex(v) for v in got[2].split()]
    assert len(w) == len(g) == 256 and all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(w, g))


BYTES = """__global__ void byte_hist(const unsigned char *data, unsigned int *bins, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[data[i]], 1);
}
"""


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_a_histogram_of_bytes_gets_256_bins(tmp_path):
    (t, _), why = privatize_atomics(BYTES, "byte_hist", LAUNCH)      # the second: 16-byte loads (below)
    assert why is None and "#define OPTIML_PRIV_CAP 256" in t.source and "int4" not in t.source
    n = 4001
    counts, scalars = {"data": n, "bins": 256}, {"n": n}
    want = _run(tmp_path, "orig", BYTES, "byte_hist", counts, scalars, ("bins",))
    got = _run(tmp_path, "priv", t.source, "byte_hist", counts, scalars, ("bins",))
    assert got == want and len(set(want[1].split())) > 2
    # signed bytes may be negative: no bound
    assert "not bounded" in privatize_atomics(BYTES.replace("unsigned char", "char"), "byte_hist", LAUNCH)[1]


# the kernel called at each of the 16 alignments of a 16-byte boundary, each call into its own 256 bins
AT_OFFSETS = """
__global__ void at_offsets(const unsigned char *raw, unsigned int *bins, int n) {
  const unsigned char *base = (const unsigned char *)(((unsigned long long)raw + 15) & ~15ull);
  for (int off = 0; off < 16; off++) byte_hist(base + off, bins + 256 * off, n);
}
"""


def _vec(source, entry):
    ts, why = privatize_atomics(source, entry, LAUNCH)
    vec = [t for t in ts if "16-byte loads" in t.edit]
    assert why is None and len(ts) == 2 and len(vec) == 1, [t.edit for t in ts]
    return vec[0]


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("n", [4001, 70003])
def test_a_byte_histogram_read_16_bytes_a_thread_counts_what_the_kernel_counts(tmp_path, n):
    t = _vec(BYTES, "byte_hist")
    assert "reinterpret_cast<const int4 *>(data)" in t.source and t.edit.endswith("OPTIML_PRIV_BLOCKS = 1024")
    # the run-time alignment check (the CPU tolerates a misaligned int4 load, the GPU faults on it)
    assert "if (((reinterpret_cast<unsigned long long>(data)) & 15) == 0)" in t.source
    # a grid of 3 blocks: each thread loops over several 16-byte chunks, then the tail (n % 16 != 0)
    few = t.source.replace("#define OPTIML_PRIV_BLOCKS 1024", "#define OPTIML_PRIV_BLOCKS 3")
    assert _launch(few, {"n": n})[0][0] == min(math.ceil(n / (128 * 16)), 3)
    counts, scalars = {"raw": n + 32, "bins": 256 * 16}, {"n": n}
    want = _run(tmp_path, "orig", BYTES + AT_OFFSETS, "at_offsets", counts, scalars, ("bins",), ("bins",))
    got = _run(tmp_path, "vec", few + AT_OFFSETS, "at_offsets", counts, scalars, ("bins",), ("bins",))
    assert got == want
    # every offset's bins (each starting at 12345) count its n bytes, and the offsets see different bytes
    per_offset = [[int(v) - 12345 for v in want[1].split()[256 * o:256 * (o + 1)]] for o in range(16)]
    assert all(sum(h) == n for h in per_offset) and len({tuple(h) for h in per_offset}) > 1


# the key through a local uint8_t, a weight read at i for each item, the index as a value; whole
# numbers in float sums, exact in any order (so a weight taken for the wrong item shows)
WEIGHTED_BYTES = """#include <cstdint>
__global__ void wbytes(const uint8_t *data, const int *w, float *sums, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint8_t k = data[i];
  atomicAdd(&sums[k], (float)(w[i] * (i % 7 + 1)));
}
"""


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_other_arrays_read_at_the_index_are_read_for_each_of_the_16_items(tmp_path):
    t = _vec(WEIGHTED_BYTES, "wbytes")
    assert "16-byte loads of data," in t.edit and "int4 *>(w)" not in t.source     # w is read one float an item
    n = 70003
    wrap = AT_OFFSETS.replace("unsigned int *bins", "const int *w, float *bins").replace("byte_hist(base + off,", "wbytes(base + off, w,")
    counts, scalars = {"raw": n + 32, "w": n, "bins": 256 * 16}, {"n": n}
    want = _run(tmp_path, "orig", WEIGHTED_BYTES + wrap, "at_offsets", counts, scalars, ("bins",), ("bins",))
    assert len(want[2].split()) == 256 * 16 and len(set(want[2].split())) > 20
    # both variants: the statements after the early return stay one item in the loop
    for tag, made in (("vec", t), ("scalar", privatize_atomics(WEIGHTED_BYTES, "wbytes", LAUNCH)[0][0])):
        few = made.source.replace("#define OPTIML_PRIV_BLOCKS 1024", "#define OPTIML_PRIV_BLOCKS 2")
        assert _run(tmp_path, tag, few + wrap, "at_offsets", counts, scalars, ("bins",), ("bins",)) == want, tag


@pytest.mark.parametrize("change", [
    ("atomicAdd(&bins[data[i]], 1);", "atomicAdd(&bins[data[i]], 1 + data[(i + 1) % n]);"),    # another index
    ("if (i < n) atomicAdd(&bins[data[i]], 1);", "if (i < n) { atomicAdd(&bins[data[i]], 1); data[i] = 0; }"),
    ("if (i < n) atomicAdd(&bins[data[i]], 1);", "if (i < n) { atomicAdd(&bins[data[i]], 1); data[i]++; }"),
    ("if (i < n) atomicAdd(&bins[data[i]], 1);", "if (i < n) { const unsigned char *p = &data[i]; atomicAdd(&bins[data[i]], 1 + (*p > 9)); }"),
], ids=["another_index", "written", "incremented", "addressed"])
def test_a_byte_array_read_otherwise_than_at_the_index_is_not_read_16_bytes_at_a_time(change):
    src = BYTES.replace("const unsigned char *data", "unsigned char *data").replace(*change)
    ts, why = privatize_atomics(src, "byte_hist", LAUNCH)
    assert why is None and [t.edit for t in ts] == ["privatized atomics into shared memory, OPTIML_PRIV_BLOCKS = 1024"]


def test_the_rewrite_compiles_for_sm_90_and_the_rules_offer_it(tmp_path):
    (t,), _ = privatize_atomics(HIST, "histogram", LAUNCH)
    if NVCC is not None:
        f = tmp_path / "k.cu"
        f.write_text(t.source)
        r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(f)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    offered = all_transforms(HIST, "histogram", launch=LAUNCH)
    assert any(x.kind == "privatize" for x in offered)
    assert not any("16-byte" in x.edit for x in offered)        # keys of 4 bytes: no byte loads


@pytest.mark.parametrize("source, entry", [(BYTES, "byte_hist"), (WEIGHTED_BYTES, "wbytes")], ids=["bytes", "weighted"])
def test_the_16_byte_loads_compile_for_sm_90_and_the_rules_offer_them(tmp_path, source, entry):
    t = _vec(source, entry)
    if NVCC is not None:
        f = tmp_path / "k.cu"
        f.write_text(t.source)
        r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-Werror", "all-warnings", "-o", str(tmp_path / "k.cubin"), str(f)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    offered = [x for x in all_transforms(source, entry, launch=LAUNCH) if x.kind == "privatize"]
    assert sorted(x.edit for x in offered) == sorted([t.edit, t.edit.replace(", 16-byte loads of data", "")])


@pytest.mark.parametrize("change, why", [
    (("atomicAdd(&counts[k], 1u);", "unsigned int old = atomicAdd(&counts[k], 1u); (void)old;"), "result is used"),
    (("int k = keys[i] % bins;", "int k = keys[i];"), "not bounded"),
    (("atomicAdd(&counts[k], 1u);", "atomicAdd(&counts[k], 1u); unsigned int c0 = counts[1]; (void)c0;"),
     "otherwise than"),
    (("atomicAdd(&counts[k], 1u);", "if (k == 3) return; atomicAdd(&counts[k], 1u);"), "returns"),
    (("int k = keys[i] % bins;", "__shared__ int s[4]; s[0] = 1; __syncthreads(); int k = keys[i] % bins;"),
     "synchronises"),
    (("atomicAdd(&counts[k], 1u);", "atomicAdd(&glob[k], 1u);"),
     "not privatized: the atomic adds at &glob[k], not at an element of one of the kernel's arrays"),
    (("int n, int bins)", "unsigned int *other, int n, int bins)", "atomicAdd(&counts[k], 1u);",
      "atomicAdd(&counts[k], 1u); atomicAdd(&other[k], 1u);"), "not privatized: atomics into more than one array"),
    (("atomicAdd(&counts[k], 1u);", "atomicAdd(&counts[k], 1u); atomicAdd(&counts[keys[i] & 15], 1u);"),
     "not privatized: the atomics' bins are bounded differently"),
    (("int k = keys[i] % bins;", "int k = keys[i] % nb;"),
     "not privatized: the bins' count nb is not made of the kernel's scalars and constants"),
    (("__global__", "// OPTIML_PRIV_CAP is the user's\n__global__"),
     "not privatized: no free names for the rewrite's constants"),
])
def test_what_it_cannot_keep_right_it_refuses_with_the_reason(change, why):
    src = HIST
    for a, b in zip(change[::2], change[1::2]):
        assert a in src
        src = src.replace(a, b)
    src = "__device__ unsigned int glob[64];\n__device__ int nb;\n" + src      # globals the kernel may name
    ts, got = privatize_atomics(src, "histogram", LAUNCH)
    assert not ts and got is not None and why in got, got
    assert re.match(r"not (privatized|coarsened)", got)


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_bench_histogram_spec_loads_and_its_privatized_rewrites_count_what_it_counts(tmp_path):
    from pathlib import Path

    from optiml.spec import load_spec
    k = Path(__file__).resolve().parents[1] / "bench" / "templates" / "rewrites" / "histogram.cu"
    src = k.read_text()
    spec = load_spec(k.with_suffix(".toml"), k, kernel_source=src)
    assert {a.name: (a.dtype, a.role) for a in spec.args} == {
        "data": ("uint8", "input"), "bins": ("uint32", "inout"), "n": ("int32", "scalar")}
    assert spec.timing_sizes == {"n": 1 << 28} and all(s["n"] % 16 for s in spec.verify_sizes)
    launch = (tuple(spec.launch.grid), tuple(spec.launch.block), spec.launch.shared_mem)
    made = [t for t in all_transforms(src, spec.entry, launch=launch) if t.kind == "privatize"]
    assert len(made) == 2 and max(made, key=lambda t: t.hint).edit.startswith(
        "privatized atomics into shared memory, 16-byte loads of data")
    for sizes in [s for s in spec.verify_sizes if s["n"] < 10000]:
        def run(tag, source):
            lc = spec.resolve_launch(sizes, parse_source(source))
            return run_on_host(tmp_path, tag, source, spec.entry, {"data": sizes["n"], "bins": 256}, sizes,
                               lc.grid[:1], lc.block[:1], ("bins",), (0, 1), threaded=True)
        want = run("orig", src)
        for i, t in enumerate(made):
            assert run(f"t{i}", t.source) == want, (t.edit, sizes)
