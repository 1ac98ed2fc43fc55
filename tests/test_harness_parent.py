"""The parent side of the GPU harness, exercised with fake child interpreters (shell scripts
standing in for `python -m optiml.verify.worker`): a child that hangs is killed at the timeout,
a child that dies is reported as a runtime error, and the parent goes on either way."""
import importlib.util
import stat
from pathlib import Path

import pytest

from optiml.spec import Launch
from optiml.verify.harness import Case, HarnessJob, KernelBinary, SubprocessHarness
from tests.test_spec import load


def fake_python(tmp_path: Path, body: str) -> str:
    p = tmp_path / "fake-python"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


@pytest.fixture
def job(tmp_path):
    spec = load(tmp_path)
    kb = KernelBinary("/nonexistent.cubin", "scale", (Launch((1, 1, 1), (1, 1, 1), 0),) * 3)
    return HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(1, 1),))


def test_hanging_child_is_killed_at_timeout(tmp_path, job):
    # the fake child records its stage, then never returns (like a kernel in an endless loop)
    import os

    pid_file = tmp_path / "child.pid"
    py = fake_python(tmp_path, f'echo "candidate at sizes {{N: 1000}}" > "$3/stage.txt"; echo spinning; '
                               f'echo $$ > {pid_file}; exec sleep 600')
    result = SubprocessHarness(timeout_s=1.0, python=py).run(job)
    assert result.status == "timeout"
    assert "1 s" in result.message and "candidate at sizes" in result.message
    assert "spinning" in result.log_tail
    assert result.wall_s < 30
    with pytest.raises(ProcessLookupError):          # killed, not left running
        os.kill(int(pid_file.read_text()), 0)


def test_child_that_dies_is_a_runtime_error(tmp_path, job):
    py = fake_python(tmp_path, 'echo "candidate at sizes {N: 77}" > "$3/stage.txt"; echo boom >&2; kill -SEGV $$')
    result = SubprocessHarness(timeout_s=30, python=py).run(job)
    assert result.status == "runtime_error"
    assert "SIGSEGV" in result.message and "candidate at sizes" in result.message
    assert "boom" in result.log_tail


def test_huge_child_output_is_kept_as_a_tail(tmp_path, job):
    py = fake_python(tmp_path, 'yes "printf from a kernel" | head -c 5000000; exit 1')
    result = SubprocessHarness(timeout_s=30, python=py).run(job)
    assert result.status == "runtime_error"
    assert len(result.log_tail) < 10_000 and "omitted" in result.log_tail


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
def test_real_worker_without_pycuda_reports_it(job):
    result = SubprocessHarness(timeout_s=60).run(job)
    assert result.status == "harness_error" and "pycuda is not installed" in result.message


def test_a_child_printing_without_end_is_stopped_at_the_log_limit(tmp_path, job):
    # like a Python reference printing in a loop: stopped at the limit, long before the timeout
    py = fake_python(tmp_path, 'echo "reference at sizes {N: 1000}" > "$3/stage.txt"; exec yes "still printing"')
    result = SubprocessHarness(timeout_s=60, python=py, log_limit=2 << 20).run(job)
    assert result.status == "runtime_error"
    assert "printed more than 2 MiB" in result.message and "reference at sizes" in result.message
    assert result.wall_s < 20 and len(result.log_tail) < 10_000
