"""GPU tests of the concurrent runner (Runner) with the real worker and ncu: a spec
with a Python reference (the worker lends the GPU while it computes it), batches under ncu
processes started ahead, and nothing left running after close.

    python3 -m pytest -m gpu tests/gpu/test_gpu_pool.py -v
"""
import subprocess

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Preparer, Runner, standard_stages
from optiml.verify.worker_client import WorkerHarness
from optiml.profiler.ncu import NcuProfiler, find_ncu
from optiml.spec import find_spec, load_spec
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

REDUCE = EXAMPLES / "reduce_sum" / "reduce_sum.cu"


def _batch_children() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "optiml.verify.worker --profile-batch"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.skipif(find_ncu() is None, reason="needs ncu")
def test_pool_with_a_python_reference_lends_the_gpu_and_profiles_every_candidate(tmp_path):
    source = REDUCE.read_text()
    spec = load_spec(find_spec(REDUCE), REDUCE, kernel_source=source)
    prep = Preparer(spec, source, NvccBuilder(detect_arch(), cache_dir=tmp_path / "cache"),
                    include_dir=REDUCE.parent, kernel_name=REDUCE.name)
    blocks = (64, 128, 256, 512, 1024, 256)
    with Runner(standard_stages(prep, NcuProfiler()), [0], harness_factory=WorkerHarness, max_batch=2) as pool:
        futures = [pool.submit(Candidate(source.replace("#define BLOCK 256", f"#define BLOCK {b}"), name=f"b{b}.cu"))
                   for b in blocks]
        results = [f.result(timeout=600) for f in futures]
        stats = pool.stats()[0]
    assert [r.status for r in results] == ["ok"] * len(blocks), [r.message for r in results]
    for r in results:
        assert r.profile is not None and r.profile.ok, r.profile.message if r.profile else None
        assert r.profile.metrics["duration_ns"] > 0
        ph = r.harness.phases
        assert ph["python_reference"] > 0 and "waiting_for_gpu" in ph and ph["verify"] >= ph["python_reference"]
        assert r.harness.timing.median_ci_rel is not None and r.harness.device_pci
    assert len(stats["profile_batches"]) >= 1 and sum(stats["profile_batches"]) == len(blocks)
    assert stats["worker_starts"] == 2          # a second worker takes the GPU while a job computes the reference
    # the same kernel twice (BLOCK 256): the same time within a few percent
    assert results[2].median_ms == pytest.approx(results[5].median_ms, rel=0.05)
    assert not _batch_children()       # the ncu started ahead and never used has quit
