"""The search's evaluator over the runner (``RunnerEvaluator``) with a FAKE runner whose futures
the test finishes by hand: a candidate the runner cannot take back (it reached a GPU) is not
reported withdrawn and still comes back from ``wait``; a candidate still queued is withdrawn and
never comes back; a background verdict (compute-sanitizer's, ``Evaluation.later``) is given by
``wait`` only once it has arrived, never waited for while other results are ready."""
import threading
from concurrent.futures import Future

from optiml.app.evaluator import RunnerEvaluator
from optiml.runner import Evaluation
from tests.conftest import RUNNER_DEADLINE

pytestmark = RUNNER_DEADLINE


class FakeRunner:
    """A fake optiml.runner.Runner: ``submit`` hands out futures the test resolves; ``withdraw``
    succeeds only for candidates in ``queued`` (not yet on a GPU), and records what it was asked."""

    def __init__(self):
        self.futures: dict[str, Future] = {}
        self.queued: set[str] = set()
        self.withdrawn: list[str] = []

    def submit(self, candidate):
        fut = self.futures[candidate.source] = Future()
        return fut

    def withdraw(self, fut) -> bool:
        source = next(s for s, f in self.futures.items() if f is fut)
        if source not in self.queued:
            return False
        self.withdrawn.append(source)
        fut.cancel()
        return True

    def hurry(self):
        pass

    def abandon(self, fut):
        pass


def test_a_candidate_already_on_a_gpu_is_not_withdrawn_and_its_result_comes_back():
    runner = FakeRunner()
    ev = RunnerEvaluator(runner)
    ev.submit(1, "running", ())
    assert ev.withdraw(1) is False
    runner.futures["running"].set_result(Evaluation("ok", median_ms=1.5))
    [(token, result)] = ev.wait()
    assert token == 1 and result.status == "ok" and result.median_ms == 1.5


def test_a_queued_candidate_is_withdrawn_and_never_comes_back():
    runner = FakeRunner()
    runner.queued.add("queued")
    ev = RunnerEvaluator(runner)
    ev.submit(1, "queued", ())
    ev.submit(2, "running", ())
    assert ev.withdraw(1) is True and runner.withdrawn == ["queued"]
    assert ev.withdraw(7) is False                    # never submitted
    runner.futures["running"].set_result(Evaluation("ok", median_ms=2.0))
    assert [t for t, _ in ev.wait()] == [2]


def test_a_background_verdict_is_given_only_once_it_has_arrived():
    runner = FakeRunner()
    ev = RunnerEvaluator(runner)
    ev.submit(1, "best", ())
    later = Future()
    runner.futures["best"].set_result(Evaluation("ok", median_ms=0.5, later=later))
    # the verdict arrives a moment after the first wait returned (or, wrongly, while it waits for it)
    timer = threading.Timer(0.3, lambda: later.set_result(Evaluation("unsafe", "memcheck: invalid write",
                                                                       median_ms=0.5)))
    timer.start()
    try:
        first = ev.wait()
    finally:
        timer.join()
    assert [(t, r.status) for t, r in first] == [(1, "ok")]
    second = ev.wait()
    assert [(t, r.status, r.message) for t, r in second] == [(1, "unsafe", "memcheck: invalid write")]
    assert ev.settle() == []                            # nothing more to come


def test_one_candidate_evaluated_alone_comes_back_as_the_searchs_result_and_its_evaluation_is_kept():
    """``evaluate`` (the plain Evaluator's call) returns what the search keeps of the runner's
    Evaluation, tells ``on_done``, and leaves the full Evaluation for the store's ``take``."""
    class OneShotRunner(FakeRunner):
        def evaluate(self, candidate):
            return Evaluation("ok", "", median_ms=float(len(candidate.source)))

    told = []
    ev = RunnerEvaluator(OneShotRunner(), on_done=lambda e, r: told.append((e.median_ms, r.status)))
    result = ev.evaluate("abc", ())
    assert (result.status, result.median_ms) == ("ok", 3.0)
    assert told == [(3.0, "ok")] and ev.take(99).median_ms == 3.0


def test_settle_gives_the_background_verdicts_of_the_candidates_that_have_one_and_nothing_for_the_rest():
    """Of two finished candidates, one with a background stage (``later``) and one without: ``settle``
    gives the one verdict to come, for its candidate, and nothing for the other."""
    runner = FakeRunner()
    ev = RunnerEvaluator(runner)
    ev.submit(1, "sanitized", ())
    ev.submit(2, "plain", ())
    later = Future()
    runner.futures["sanitized"].set_result(Evaluation("ok", median_ms=0.5, later=later))
    runner.futures["plain"].set_result(Evaluation("ok", median_ms=0.7))
    assert sorted(t for t, _ in ev.wait()) == [1, 2]
    later.set_result(Evaluation("unsafe", "racecheck: hazard", median_ms=0.5))
    assert [(t, r.status) for t, r in ev.settle()] == [(1, "unsafe")]
