"""The structural rewrites on the GPU: every variant the rewrites make of the first kernels in
bench/templates/rewrites (one at a time, and the reduction ones chained) verifies against the
reference at the specs' odd sizes, and those that claim speed are faster than the kernel they
rewrote. Run on a GPU machine:

    python3 -m pytest -m gpu tests/gpu/test_gpu_rewrites.py -v
"""
from pathlib import Path

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.edits.transforms import (accumulate_first, cache_rereads, grid_stride, tie_block_literal,
                                     vectorize_float4, warp_shuffle)
from optiml.runner import Candidate, Runner
from optiml.spec import load_spec
from optiml.verify.harness import SubprocessHarness

pytestmark = pytest.mark.gpu

TASKS = Path(__file__).resolve().parents[2] / "bench" / "templates" / "rewrites"


def runner_for(tmp_path, task: str):
    kernel = TASKS / f"{task}.cu"
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    launch = (spec.launch.grid, spec.launch.block, spec.launch.shared_mem)
    r = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"),
                          SubprocessHarness(timeout_s=180), include_dir=kernel.parent)
    return r, src, spec.entry, launch


def one(rewrite, src, entry, launch):
    ts, why = rewrite(src, entry, launch)
    assert ts, why
    return ts[0].source


def evaluate(runner, src, name):
    ev = runner.evaluate(Candidate(src, name=name), profile=False)
    assert ev.status == "ok", f"{name}: {ev.status}: {ev.message}"
    return ev.median_ms


@pytest.mark.parametrize("task, chain, faster", [
    ("block_sum", ["accumulate_first"], True),
    ("block_sum", ["accumulate_first", "warp_shuffle"], True),
    ("block_sum", ["tie_block_literal", "accumulate_first", "warp_shuffle"], True),
    ("rmsnorm_strided", ["cache_rereads"], False),
    ("rmsnorm_strided", ["tie_block_literal", "cache_rereads"], False),
    ("softmax_long", ["cache_rereads"], False),
    ("softmax_long", ["tie_block_literal", "warp_shuffle", "cache_rereads"], False),
    ("silu", ["vectorize_float4"], True),
    ("silu", ["tie_block_literal", "grid_stride"], False),
])
def test_rewritten_first_kernels_verify_and_the_claimed_ones_are_faster(tmp_path, task, chain, faster):
    rewrites = {f.__name__: f for f in (accumulate_first, cache_rereads, grid_stride, tie_block_literal,
                                        vectorize_float4, warp_shuffle)}
    runner, src, entry, launch = runner_for(tmp_path, task)
    seed_ms = evaluate(runner, src, f"{task}.cu")
    out = src
    for name in chain:
        out = one(rewrites[name], out, entry, launch)
    ms = evaluate(runner, out, f"{task}_{'_'.join(chain)}.cu")
    print(f"{task} {' + '.join(chain)}: {seed_ms:.4f} -> {ms:.4f} ms ({seed_ms / ms:.2f}x)", flush=True)
    if faster:
        assert ms < 0.9 * seed_ms
