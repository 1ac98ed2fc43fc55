"""Privatized atomics (optiml/edits/atomics.py): a histogram's global atomics made per-block copies
in shared memory, merged once a block. The rewrite runs on the CPU (tests/host_emulation.py: a FAKE
GPU for semantics only, threads cooperating for real under AddressSanitizer) against the kernel it
replaces, compiles with nvcc for sm_90, and refuses what it cannot keep right, saying why."""
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


def _run(tmp, tag, source, entry, counts, scalars, outs):
    grid, block = _launch(source, scalars)
    return run_on_host(tmp, tag, source, entry, counts, scalars, grid, block, (), (0,), threaded=True)[0]


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
    (t,), why = privatize_atomics(BYTES, "byte_hist", LAUNCH)
    assert why is None and "#define OPTIML_PRIV_CAP 256" in t.source
    n = 4001
    counts, scalars = {"data": n, "bins": 256}, {"n": n}
    want = _run(tmp_path, "orig", BYTES, "byte_hist", counts, scalars, ("bins",))
    got = _run(tmp_path, "priv", t.source, "byte_hist", counts, scalars, ("bins",))
    assert got == want and len(set(want[1].split())) > 2
    # signed bytes may be negative: no bound
    assert "not bounded" in privatize_atomics(BYTES.replace("unsigned char", "char"), "byte_hist", LAUNCH)[1]


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


@pytest.mark.parametrize("change, why", [
    (("atomicAdd(&counts[k], 1u);", "unsigned int old = atomicAdd(&counts[k], 1u); (void)old;"), "result is used"),
    (("int k = keys[i] % bins;", "int k = keys[i];"), "not bounded"),
    (("atomicAdd(&counts[k], 1u);", "atomicAdd(&counts[k], 1u); unsigned int c0 = counts[1]; (void)c0;"),
     "otherwise than"),
    (("atomicAdd(&counts[k], 1u);", "if (k == 3) return; atomicAdd(&counts[k], 1u);"), "returns"),
    (("int k = keys[i] % bins;", "__shared__ int s[4]; s[0] = 1; __syncthreads(); int k = keys[i] % bins;"),
     "synchronises"),
])
def test_what_it_cannot_keep_right_it_refuses_with_the_reason(change, why):
    src = HIST.replace(*change)
    ts, got = privatize_atomics(src, "histogram", LAUNCH)
    assert not ts and got is not None and why in got, got
    assert re.match(r"not (privatized|coarsened)", got)
