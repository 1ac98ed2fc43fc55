"""What `run_optimize` says, in one sentence, when it cannot give a user a faster kernel: the seed
itself does not verify (the run is kept, marked failed), an unknown --sanitize mode, and a best
kernel it cannot write (it stays in the database). FAKE GPU parts (tests/test_optimize_fakes.py);
real nvcc builds and a real trace store; none of it is GPU behaviour."""
import pytest

from optiml.app.optimize import OptimizeOptions, run_optimize
from optiml.errors import UserError
from optiml.traces.store import TraceStore
from optiml.verify.harness import HarnessResult
from tests.fakes import FakeHarness, fake_gpu_machine
from tests.test_optimize_fakes import FakeBlockWorker, FakeSanitizer, fake_gpu  # noqa: F401 (a fixture)
from tests.test_spec import KERNEL, SPEC, write
from tests.conftest import RUNNER_DEADLINE

pytestmark = RUNNER_DEADLINE

SMALL = SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }")


class WrongWorker(FakeHarness):
    """A FAKE GPU worker on which every kernel writes a wrong value."""

    def __init__(self, device=0, timeout_s=120.0):
        self.device = device

    def run(self, job, lend=None):
        return HarnessResult("wrong_output", "y: max abs error 3 at y[7] (atol 1e-05, rtol 1e-05)")


def test_a_seed_that_does_not_verify_is_one_sentence_and_the_run_is_kept_as_failed(tmp_path, monkeypatch):
    fake_gpu_machine(monkeypatch, WrongWorker, FakeSanitizer)
    kernel, _ = write(tmp_path, SMALL, KERNEL)
    out = tmp_path / "best.cu"
    with pytest.raises(UserError) as e:
        run_optimize(OptimizeOptions(kernel=kernel, budget=3, profile=False, db=tmp_path / "t.db", arch="sm_90",
                                     parallel=1, build_jobs=1, output=out))
    assert str(e.value) == (f"{kernel}: the kernel itself does not verify (wrong_output: y: max abs error 3 at y[7] "
                            f"(atol 1e-05, rtol 1e-05)); fix it first.")
    assert not out.exists()
    with TraceStore(tmp_path / "t.db", create=False) as store:
        [run] = store.runs()
        assert run["status"] == "failed"


def test_an_unknown_sanitize_mode_is_one_sentence(tmp_path, fake_gpu):
    kernel, _ = write(tmp_path, SMALL, KERNEL)
    with pytest.raises(UserError) as e:
        run_optimize(OptimizeOptions(kernel=kernel, budget=1, profile=False, db=tmp_path / "t.db", arch="sm_90",
                                     sanitize="always"))
    assert str(e.value) == "--sanitize takes best, all or off, not 'always'."
    assert not (tmp_path / "t.db").exists()


def test_a_best_kernel_it_cannot_write_stays_in_the_database(tmp_path, fake_gpu):
    FakeSanitizer.under = 0
    kernel, _ = write(tmp_path, SMALL, KERNEL)
    out = tmp_path / "no-such-folder" / "best.cu"
    with pytest.raises(UserError) as e:
        run_optimize(OptimizeOptions(kernel=kernel, budget=2, profile=False, db=tmp_path / "t.db", arch="sm_90",
                                     parallel=1, build_jobs=1, templates=False, output=out))
    assert str(e.value) == (f"{out}: cannot write the best kernel (No such file or directory); it is kept in the "
                            f"database: optiml best 1 -o FILE")
    with TraceStore(tmp_path / "t.db", create=False) as store:
        [run] = store.runs()
        assert run["status"] == "done" and isinstance(store.run(run["id"])["result"]["best_node"], int)
