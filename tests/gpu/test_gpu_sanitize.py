"""compute-sanitizer on the GPU: a correct kernel passes every tool; a write one past the end
(outputs right: it lands in the allocation's slack) and a shared-memory race are unsafe.

    python3 -m pytest -m gpu tests/gpu/test_gpu_sanitize.py -v
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


def _optimize(tmp_path, kernel, *args):
    import subprocess
    import sys

    from tests.conftest import ROOT

    return subprocess.run([sys.executable, "-m", "optiml", "optimize", str(kernel), "--db", str(tmp_path / "t.db"),
                           "-o", str(tmp_path / "best.cu"), *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_optimize_sanitizes_its_best_end_to_end(tmp_path):
    """`optiml optimize examples/transpose_naive --budget 20` (default --sanitize best): new bests
    are sanitized while the search runs, the written kernel is sanitized clean, and the summary
    and the store say so."""
    from optiml.traces.store import TraceStore
    from tests.conftest import EXAMPLES

    p = _optimize(tmp_path, EXAMPLES / "transpose_naive" / "transpose_naive.cu", "--budget", 20)
    assert p.returncode == 0, p.stderr[-2000:] + p.stdout
    assert "sanitize: passed memcheck, racecheck, initcheck, synccheck" in p.stdout, p.stdout
    with TraceStore(tmp_path / "t.db", create=False) as store:
        final = store.run(1)["result"]
        assert final["status"] == "ok" and final["sanitize"]["status"] == "clean"
        verdicts = [(store.evaluation(n.id)["result"] or {}).get("sanitize") for n in store.nodes(1)
                    if store.evaluation(n.id)]
        assert any(v and v["status"] == "clean" for v in verdicts)          # sanitized during the search
        print(f"{sum(1 for v in verdicts if v)} of {len(verdicts)} candidates sanitized; final {final['speedup']:.2f}x")


def test_optimize_never_writes_an_unsafe_kernel(tmp_path):
    """A seed that writes one past the end (right outputs) and edits that keep the bug: the run
    ends with one sentence saying there is no safe kernel, and writes none."""
    from tests.test_spec import write

    kernel, _ = write(tmp_path, SMALL, PAST_END)
    p = _optimize(tmp_path, kernel, "--budget", 3, "--no-profile")
    assert p.returncode != 0 and "no safe kernel to write" in (p.stderr + p.stdout), p.stderr[-2000:] + p.stdout
    assert "Traceback" not in p.stderr and not (tmp_path / "best.cu").exists()
    assert "Invalid __global__ write" in p.stderr + p.stdout
