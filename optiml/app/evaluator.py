"""The search's evaluator over the runner: a node's source and flags in, the search's
:class:`~optiml.search.result.Result` out, the full :class:`~optiml.runner.Evaluation` kept for the store."""
from __future__ import annotations

import concurrent.futures
from dataclasses import asdict
from typing import Callable

from ..runner import Candidate, Evaluation, Runner
from ..search.result import Result


def search_result(ev: Evaluation) -> Result:
    """What the search keeps of an Evaluation."""
    hr, prof = ev.harness, ev.profile
    profiled = prof is not None and prof.ok
    return Result(status=str(ev.status), message=ev.message, median_ms=ev.median_ms,
                  spread=hr.timing.spread if hr is not None and hr.timing is not None else None,
                  metrics=dict(prof.metrics) if profiled else {}, diagnosis=tuple(prof.diagnosis) if profiled else (),
                  resources=asdict(ev.resources) if ev.resources else {}, stage_s=dict(ev.stage_s),
                  speed_of_light=ev.speed_of_light, sanitize=ev.sanitize.to_dict() if ev.sanitize else None)


class RunnerEvaluator:
    """The search's Evaluator and AsyncEvaluator over a :class:`~optiml.runner.Runner`.

    ``on_done(evaluation, result)`` is called for every finished candidate; :meth:`take` gives
    the store the full Evaluation of a finished node."""

    def __init__(self, runner: Runner, on_done: Callable[[Evaluation, Result], None] | None = None):
        self.runner = runner
        self.on_done = on_done
        self._last: Evaluation | None = None            # of the last evaluate()
        self._details: dict[int, Evaluation] = {}       # token -> Evaluation of finished submitted candidates
        self._futures: dict[concurrent.futures.Future, int] = {}
        self._later: dict[concurrent.futures.Future, int] = {}   # Evaluation.later of given-out results -> token

    def _done(self, ev: Evaluation) -> Result:
        result = search_result(ev)
        if self.on_done:
            self.on_done(ev, result)
        return result

    def evaluate(self, source: str, flags) -> Result:
        ev = self.runner.evaluate(Candidate(source, tuple(flags)))
        self._last = ev
        return self._done(ev)

    def submit(self, token: int, source: str, flags) -> None:
        self._futures[self.runner.submit(Candidate(source, tuple(flags)))] = token

    def withdraw(self, token: int) -> bool:
        """Take back submitted candidate ``token`` if it has not reached a GPU yet (see
        :meth:`Runner.withdraw`); True when it will not come back from :meth:`wait`."""
        fut = next((f for f, t in self._futures.items() if t == token), None)
        if fut is None or not self.runner.withdraw(fut):
            return False
        del self._futures[fut]
        return True

    def wait(self) -> list[tuple[int, Result]]:
        """Every finished candidate, and every later result (a background stage's verdict) of a
        candidate already returned, once there is at least one."""
        done, _ = concurrent.futures.wait(list(self._futures) + list(self._later),
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        out = []
        for fut in [f for f in self._futures if f in done]:          # in submission order
            token = self._futures.pop(fut)
            ev = fut.result()             # a runner that raised has a bug: let it out
            if ev.later is not None:
                self._later[ev.later] = token
            self._details[token] = ev
            out.append((token, self._done(ev)))
        return out + self._amended(done)

    def settle(self, keep=None) -> list[tuple[int, Result]]:
        """Wait for every later result still to come: (token, Result) for each. With ``keep`` (a
        set of tokens), the others' background stages are abandoned first (they stop, and come
        back as they were)."""
        if not self._later:
            return []
        if keep is not None:
            for fut, token in list(self._later.items()):
                if token not in keep:
                    self.runner.abandon(fut)
        self.runner.hurry()
        concurrent.futures.wait(list(self._later))
        return self._amended(set(self._later))

    def _amended(self, done) -> list[tuple[int, Result]]:
        out = []
        for fut in [f for f in self._later if f in done]:
            token = self._later.pop(fut)
            out.append((token, search_result(fut.result())))
        return out

    def take(self, token: int) -> Evaluation | None:
        """The Evaluation of finished node ``token`` (submitted), or of the last evaluate()."""
        return self._details.pop(token) if token in self._details else self._last
