"""What the GPU harness's parent reports of a child, checked with fake child interpreters (shell
scripts standing in for `python -m optiml.verify.worker DIR`): the child's output comes back
whole when it is short and as its last bytes, with a count of what was left out, when it is long;
a result the child wrote is read back as it wrote it; a child that ends without one, or writes
one that cannot be read, is reported as such; a timeout names the limit and the last stage."""
import json
import stat
from pathlib import Path

import pytest

from optiml.spec import Launch
from optiml.verify import harness
from optiml.verify.harness import Case, HarnessJob, HarnessResult, KernelBinary, SubprocessHarness, TimingResult
from tests.test_spec import load


class FakeChildInterpreter:
    """An executable shell script run in place of the Python interpreter; the job's directory is $3."""

    def __init__(self, tmp_path: Path, body: str):
        self.path = tmp_path / "fake-python"
        self.path.write_text("#!/bin/sh\n" + body + "\n")
        self.path.chmod(self.path.stat().st_mode | stat.S_IEXEC)

    def __str__(self) -> str:
        return str(self.path)


@pytest.fixture
def job(tmp_path):
    spec = load(tmp_path)
    kb = KernelBinary("/nonexistent.cubin", "scale", (Launch((1, 1, 1), (1, 1, 1), 0),) * 3)
    return HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(1, 1),))


def _timing(median: float) -> dict:
    return dict(median_ms=median, mean_ms=median, min_ms=median, max_ms=median, p10_ms=median, p90_ms=median,
                iqr_ms=0.0, reps=10, warmup_launches=2, input_sets=1, flushed_l2=True)


def test_a_short_output_comes_back_whole_with_no_omission_note(tmp_path, job):
    py = FakeChildInterpreter(tmp_path, 'printf "loading cubin\\nlaunching\\n"; exit 3')
    result = SubprocessHarness(timeout_s=30, python=str(py)).run(job)
    assert result.status == "runtime_error"
    assert result.log_tail == "loading cubin\nlaunching\n"


def test_a_child_that_prints_nothing_has_an_empty_tail(tmp_path, job):
    result = SubprocessHarness(timeout_s=30, python=str(FakeChildInterpreter(tmp_path, "exit 0"))).run(job)
    assert result.log_tail == ""


def test_a_long_output_keeps_its_last_bytes_and_counts_the_rest(tmp_path, job):
    # 1000 lines of 10 bytes: the tail is the last LOG_TAIL bytes, the note counts the others
    py = FakeChildInterpreter(tmp_path, 'i=0; while [ $i -lt 1000 ]; do printf "line %04d\\n" $i; i=$((i+1)); done; exit 1')
    result = SubprocessHarness(timeout_s=30, python=str(py)).run(job)
    skipped = 10_000 - harness.LOG_TAIL
    note = f"[... {skipped} bytes of child output omitted ...]\n"
    assert result.log_tail.startswith(note)
    body = result.log_tail[len(note):]
    assert len(body) == harness.LOG_TAIL and body.endswith("line 0999\n")


def test_a_child_that_exits_without_a_result_reports_its_code_and_stage(tmp_path, job):
    py = FakeChildInterpreter(tmp_path, 'echo "reference at sizes {N: 5}" > "$3/stage.txt"; exit 0')
    result = SubprocessHarness(timeout_s=30, python=str(py)).run(job)
    assert result.status == "runtime_error"
    assert result.message == "the GPU child exited with code 0 without a result during reference at sizes {N: 5}"
    assert result.stage == "reference at sizes {N: 5}"


def test_the_childs_result_is_read_back_with_its_timings(tmp_path, job):
    written = {"status": "ok", "message": "fine", "timing": _timing(2.0), "baseline_timing": None,
               "vendor_timing": _timing(3.0), "stage": "timing", "phases": {"verify": 0.5}}
    (tmp_path / "result.json").write_text(json.dumps(written))
    py = FakeChildInterpreter(tmp_path, f'cp "{tmp_path / "result.json"}" "$3/result.json"; echo done')
    result = SubprocessHarness(timeout_s=30, python=str(py)).run(job)
    assert (result.status, result.message, result.stage, result.phases) == ("ok", "fine", "timing", {"verify": 0.5})
    assert isinstance(result.timing, TimingResult) and result.timing.median_ms == 2.0
    assert result.baseline_timing is None
    assert isinstance(result.vendor_timing, TimingResult) and result.vendor_timing.median_ms == 3.0
    assert result.log_tail == "done\n" and result.wall_s > 0


def test_an_unreadable_result_is_a_harness_error(tmp_path, job):
    py = FakeChildInterpreter(tmp_path, 'echo "{not json" > "$3/result.json"')
    result = SubprocessHarness(timeout_s=30, python=str(py)).run(job)
    assert result.status == "harness_error" and result.message.startswith("could not read the child's result")


def test_a_result_keeps_its_timings_and_rivals_through_a_dict():
    r = HarnessResult("ok", timing=TimingResult(**_timing(1.5)), vendor_timing=TimingResult(**_timing(4.0)),
                      rivals=[harness.RivalResult("ok", "", TimingResult(**_timing(1.2))),
                              harness.RivalResult("wrong_output", "max abs error 1")])
    back = HarnessResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.timing == r.timing and back.vendor_timing == r.vendor_timing and back.baseline_timing is None
    assert back.rivals == r.rivals


def test_a_child_that_does_not_finish_in_time_is_a_timeout_naming_the_limit(tmp_path, job):
    py = FakeChildInterpreter(tmp_path, 'echo "candidate timing" > "$3/stage.txt"; exec sleep 30')
    result = SubprocessHarness(timeout_s=0.5, python=str(py)).run(job)
    assert result.status == "timeout"
    assert result.message == "the GPU child did not finish within 0.5 s (last stage: candidate timing) and was killed"
    assert 0.5 <= result.wall_s < 10


def test_a_child_that_finishes_within_the_timeout_is_not_cut_short(tmp_path, job):
    py = FakeChildInterpreter(tmp_path, 'sleep 0.4; echo finished; exit 2')
    result = SubprocessHarness(timeout_s=10, python=str(py)).run(job)
    assert result.status == "runtime_error" and "code 2" in result.message
    assert result.log_tail == "finished\n"
