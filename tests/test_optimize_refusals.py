"""What `run_optimize` says, in one sentence, when it cannot give a user a faster kernel: the seed
itself does not verify (the run is kept, marked failed), an unknown --sanitize mode, and a best
kernel it cannot write (it stays in the database). FAKE GPU parts (tests/test_optimize_fakes.py);
real nvcc builds and a real trace store; none of it is GPU behaviour."""
import pytest

from optiml.app.optimize import OptimizeOptions, run_optimize
from optiml.errors import UserError
from optiml.traces.store import TraceStore
from optiml.verify.harness import HarnessResult
from tests.conftest import RUNNER_DEADLINE
from tests.fakes import FakeHarness, fake_gpu_machine
from tests.test_optimize_fakes import FakeSanitizer, fake_gpu  # noqa: F401 (a fixture)
from tests.test_spec import KERNEL, SPEC, write

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


def test_the_stop_sentence_counts_the_failed_candidates_and_names_the_commonest_refusal():
    """A search that ran out of proposals (a FAKE search: its nodes and what was tried from them):
    the candidates and how many failed, the refused rewrites and the commonest reason with its count,
    and what would go further (the LLM only when the rules proposed)."""
    from types import SimpleNamespace

    from optiml.app.optimize import stop_sentence
    from optiml.edits.types import Attempt
    from optiml.status import Status

    refused = lambda why: Attempt("a rewrite", Status.REFUSED, why)               # noqa: E731
    root = SimpleNamespace(parent=None, status=Status.OK, tried=[refused("not cached: x is written between the loops"),
                                                                   Attempt("BLOCK 128 -> 256", Status.WRONG_OUTPUT, "")])
    kids = [SimpleNamespace(parent=root, status=s, tried=t) for s, t in (
        (Status.OK, [refused("not chunked: no halving loop"), refused("not cached: y holds int")]),
        (Status.WRONG_OUTPUT, []), (Status.COMPILE_ERROR, [refused("not cached: the loops' step 2 is not known")]))]
    search = SimpleNamespace(stopped="exhausted", evaluations=3, nodes=[root, *kids])
    assert stop_sentence(search, 10, "rules") == (
        "the search stopped after 3 of 10 candidates: nothing was left to propose, every proposal at every node was "
        "tried (3 candidates, 2 of them failed; 4 rewrites refused, most often: not cached (3x)); to go further: "
        "--proposer llm or mixed (an OpenAI-compatible server), or a [tune] table in the spec (the kernel's tunables "
        "and their values), or a hand-written --seed-kernel.")
    one = SimpleNamespace(stopped="exhausted", evaluations=1, nodes=[SimpleNamespace(parent=None, status=Status.OK,
                                                                                     tried=[refused("not chunked: x")])])
    assert "1 rewrites refused, most often: not chunked)" in stop_sentence(one, 10, "llm")
    assert "--proposer llm" not in stop_sentence(one, 10, "llm")
    assert stop_sentence(SimpleNamespace(stopped="budget", evaluations=3, nodes=[root]), 10, "rules") is None
    assert stop_sentence(SimpleNamespace(stopped="exhausted", evaluations=10, nodes=[root]), 10, "rules") is None
