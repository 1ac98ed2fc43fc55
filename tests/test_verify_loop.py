"""The GPU child's one verification loop (verify.worker.verify_cases) over scripted fake case
buffers standing in for the host and device ones (the real ones run in tests/gpu): what each
failure becomes, where the loop stops, what it keeps for the timed launches' check."""
import pytest

from optiml.status import Status
from optiml.verify.compare import CaseCheck
from optiml.verify.gpu import KernelFault
from optiml.verify.harness import Case, HarnessJob, HarnessResult, KernelBinary
from optiml.verify.worker import verify_cases
from tests.test_spec import load


class FakeCaseBuffers:
    """Scripted: ``script[(size_index, seed)]`` is "ok", "wrong", "ref_raises" or "fault"."""

    def __init__(self, script, log, case, sizes):
        self.what, self.log, self.case, self.sizes = script.get((case.size_index, case.seed), "ok"), log, case, sizes

    def reference_case(self):
        self.log.append(("ref_case", self.case.seed))

    def run_reference(self, ref, stage):
        if self.what == "ref_raises":
            raise ValueError("the reference's x has 3 elements")

    def candidate_case(self):
        self.log.append(("cand_case", self.case.seed))

    def run_candidate(self, fn):
        if self.what == "fault":
            raise KernelFault("an illegal memory access was encountered")

    def judge(self):
        ok = self.what != "wrong"
        return CaseCheck(self.case.size_index, self.sizes, self.case.seed, ok, None if ok else "mismatch",
                         "" if ok else "y: 3 of 1000 elements differ")

    def keep_reference(self, keep):
        keep["timing_ref"] = self.case.seed

    def free(self):
        self.log.append(("free", self.case.seed))


def run(tmp_path, script, cases=((1, 11), (2, 22), (0, 33))):
    spec = load(tmp_path)
    kb = KernelBinary("k.cubin", "k", ())
    job = HarnessJob(spec, kb, kb, tuple(Case(i, s) for i, s in cases))
    result, log, stages, keep = HarnessResult(Status.OK), [], [], {}
    ok = verify_cases(job, stages.append, result, lambda case, sizes: FakeCaseBuffers(script, log, case, sizes),
                      ref=None, cand=None, keep=keep)
    return ok, result, log, stages, keep


def test_every_case_passes_and_the_timing_size_reference_is_kept(tmp_path):
    ok, result, log, stages, keep = run(tmp_path, {})
    assert ok and result.status == Status.OK and [c.seed for c in result.checks] == [11, 22, 33]
    assert keep == {"timing_ref": 33}                     # only the timing size's reference
    assert [e for e in log if e[0] == "free"] == [("free", 11), ("free", 22), ("free", 33)]
    assert stages[0].startswith("reference at sizes") and stages[1].startswith("candidate at sizes")


@pytest.mark.parametrize("what, status, words", [
    ("ref_raises", Status.REFERENCE_ERROR, "the Python reference failed at sizes"),
    ("fault", Status.RUNTIME_ERROR, "an illegal memory access"),
    ("wrong", Status.WRONG_OUTPUT, "3 of 1000 elements differ"),
])
def test_the_first_failure_ends_the_loop_as_a_status(tmp_path, what, status, words):
    ok, result, log, stages, keep = run(tmp_path, {(2, 22): what})
    assert not ok and result.status == status and words in result.message
    assert ("free", 22) in log and all(e[1] != 33 for e in log)      # freed, and the next case never started
    assert len(result.checks) == (2 if what == "wrong" else 1)      # a judged case is recorded
    assert keep == {}
    if what == "ref_raises":
        assert ("cand_case", 22) not in log                         # the candidate did not run


def test_a_failed_timing_size_case_keeps_nothing(tmp_path):
    ok, result, log, stages, keep = run(tmp_path, {(0, 33): "wrong"})
    assert not ok and keep == {}
