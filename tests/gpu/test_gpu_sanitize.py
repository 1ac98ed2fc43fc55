"""compute-sanitizer on the GPU: a correct kernel passes every tool; a write one past the end
(outputs right: it lands in the allocation's slack) and a shared-memory race are unsafe.

    source .device/install.sh && python3 -m pytest -m gpu tests/gpu/test_gpu_sanitize.py -v
"""
import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Runner
from optiml.verify.harness import SubprocessHarness
from optiml.verify.sanitizer import Sanitizer, find_sanitizer
from tests.test_spec import KERNEL, SPEC, load

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(find_sanitizer() is None, reason="needs compute-sanitizer")]

SMALL = SPEC.replace("timing = { N = 1048576 }", "timing = { N = 1000 }").replace(
    "verify = [{ N = 1000 }, { N = 77 }]", "verify = [{ N = 333 }, { N = 77 }]")
PAST_END = KERNEL.replace("if (i < n) y[i] = alpha * x[i];", "if (i <= n) y[i] = i < n ? alpha * x[i] : 0.0f;")
RACE = KERNEL.replace("if (i < n) y[i] = alpha * x[i];", """__shared__ float s[BLOCK];
    if (i < n) s[threadIdx.x] = x[i];
    float other = s[(threadIdx.x + 64) % BLOCK];     // another warp's slot, read with no barrier
    if (i < n) y[i] = alpha * x[i] + 0.0f * fminf(fabsf(other), 0.0f);""")


def evaluate(tmp_path, source):
    spec = load(tmp_path, SMALL)
    runner = Runner.sequential(spec, KERNEL, NvccBuilder(detect_arch(), cache_dir=tmp_path / "c"),
                               SubprocessHarness(), sanitizer=Sanitizer(), include_dir=tmp_path)
    with runner:
        return runner.evaluate(Candidate(source), time_it=False, sanitize=True)


def test_a_correct_kernel_passes_every_tool(tmp_path):
    ev = evaluate(tmp_path, KERNEL)
    assert ev.status == "ok" and ev.sanitize.status == "clean", ev.sanitize
    assert ev.sanitize.tools == ("memcheck", "racecheck", "initcheck", "synccheck")


def test_a_write_past_the_end_with_right_outputs_is_unsafe(tmp_path):
    ev = evaluate(tmp_path, PAST_END)
    assert ev.harness.checks and all(c.passed for c in ev.harness.checks)       # the outputs are right
    assert ev.status == "unsafe" and ev.sanitize.finding.tool == "memcheck", ev.sanitize
    assert "write" in ev.message and "after the nearest allocation" in ev.message


def test_a_shared_memory_race_with_right_outputs_is_unsafe(tmp_path):
    ev = evaluate(tmp_path, RACE)
    assert ev.harness.checks and all(c.passed for c in ev.harness.checks)
    assert ev.status == "unsafe" and ev.sanitize.finding.tool == "racecheck", ev.sanitize
