"""Kernel Tuner's search strategies replayed on a recorded tuning space (tests/data/spaces/*.json), no GPU.

    python3 bench/search_quality/kt_replay.py tests/data/spaces/synthetic_small.json --strategy bayes_opt --seed 0 --budget 50

The space becomes a Kernel Tuner cache file (the layout ``util.process_cache`` writes and
``util.read_cache`` reads in kernel_tuner 1.5.0) and Kernel Tuner tunes it in simulation mode:

    {"device_name": space.gpu, "kernel_name": space.entry, "problem_size": [1],
     "tune_params_keys": [names in order], "tune_params": {name: [values]}, "objective": "time",
     "cache": {"16,8,1": {"BX": 16, "BY": 8, "U": 1, "time": 0.123, "times": [0.123],
                          "compile_time": 0, "verification_time": 0, "benchmark_time": 0}, ...}}

A key is the point's values joined by commas in ``tune_params_keys`` order. A failed point's "time"
is the name of Kernel Tuner's error class, which ``read_cache`` turns into ``__error__``: optiml's
compile_error is ``CompilationFailedConfig``, launch_config_error (the launch or the restrictions
refuse the point: Kernel Tuner's "too many threads per block") is ``InvalidConfig``, and every other
failure (wrong_output, launch_error, timeout, ...) is ``RuntimeFailedConfig``. The recorded space
lists every point that satisfies its restrictions, so Kernel Tuner's restriction is membership in
that list (as ``tune_cache`` does, but keeping the failed points: they cost an evaluation). The
timings are zero so simulated time means nothing here; only the number of evaluations counts.

``max_fevals`` (Kernel Tuner's budget option) counts distinct points evaluated, failed ones
included; a point served again from the cache is not counted, nor returned here.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import random
import sys
import tempfile
import warnings
from pathlib import Path

STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt", "bayes_opt_skipfail",
              "greedy_ils", "mls", "pso", "diff_evo", "firefly_algorithm")
BO_POPSIZE = 20                         # bayes_opt's default initial sample
BO_INVALID = 1e20                       # bayes_opt's value for a point it may not evaluate

ERROR_CONFIGS = {"compile_error": "CompilationFailedConfig", "launch_config_error": "InvalidConfig"}
RUNTIME_FAILED = "RuntimeFailedConfig"


def kt_error(status: str) -> str:
    """Kernel Tuner's error class name for one of optiml's failure statuses."""
    return ERROR_CONFIGS.get(status, RUNTIME_FAILED)


def cache_json(space: dict) -> dict:
    """The space as a Kernel Tuner cache file's content."""
    names = list(space["tune_params"])
    cache = {}
    for *values, status, ms in space["points"]:
        record = dict(zip(names, values))
        ok = status == "ok" and ms is not None
        record.update(time=float(ms) if ok else kt_error(status), times=[float(ms)] if ok else [],
                      compile_time=0.0, verification_time=0.0, benchmark_time=0.0)
        cache[",".join(str(v) for v in values)] = record
    return {"device_name": space.get("gpu") or "recorded", "kernel_name": _kernel_name(space),
            "problem_size": [1], "tune_params_keys": names,
            "tune_params": {n: list(v) for n, v in space["tune_params"].items()},
            "objective": "time", "cache": cache}


def _kernel_name(space: dict) -> str:
    return str(space.get("entry") or space.get("name") or "kernel")


@contextlib.contextmanager
def _bayes_opt_patched(seed: int, skip_failures: bool):
    """Kernel Tuner's bayes_opt, reproducible for ``seed`` (scipy's LatinHypercube, which draws its
    initial sample, takes fresh entropy unless given a seed) and, with ``skip_failures``, seeing a
    failed point as its own "invalid" value (1e20) instead of CostFunc's sys.float_info.max: in
    kernel_tuner 1.5.0 the latter is fitted as a valid observation, and one failure wrecks the model
    (the search then walks the space in a fixed order)."""
    import numpy as np
    bo = importlib.import_module("kernel_tuner.strategies.bayes_opt")
    saved = bo.LatinHypercube, bo.CostFunc

    def seeded_lhs(d, **kw):
        return saved[0](d, **kw, rng=np.random.default_rng(seed))

    class SkipFailures(saved[1]):
        def eval_all(self, xs, check_restrictions=True):
            return [BO_INVALID if v == sys.float_info.max else v
                    for v in super().eval_all(xs, check_restrictions=check_restrictions)]

    bo.LatinHypercube = seeded_lhs
    if skip_failures:
        bo.CostFunc = SkipFailures
    try:
        yield
    finally:
        bo.LatinHypercube, bo.CostFunc = saved


def kernel_tuner_trace(space: dict, strategy: str, seed: int, budget: int) -> list[float | None]:
    """The objective (ms) of each point Kernel Tuner's ``strategy`` evaluated on ``space``, in order, a
    failed one as None; at most ``budget`` of them (fewer where the strategy stopped earlier).
    ``bayes_opt_skipfail`` is bayes_opt with failures kept out of its model (see _bayes_opt_patched)."""
    import numpy as np
    from constraint import FunctionConstraint
    from kernel_tuner import tune_kernel

    names = list(space["tune_params"])
    listed = {tuple(p[:len(names)]) for p in space["points"]}
    budget = min(budget, len(listed))
    options: dict = {"max_fevals": budget}
    kt_strategy = "bayes_opt" if strategy == "bayes_opt_skipfail" else strategy
    if kt_strategy == "bayes_opt" and budget <= BO_POPSIZE:
        options["popsize"] = max(1, budget // 2)     # it needs evaluations left after its initial sample

    def listed_point(*values) -> bool:
        return values in listed

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as patches:
        path = os.path.join(tmp, "cache.json")
        with open(path, "w") as f:
            json.dump(cache_json(space), f)
        if kt_strategy == "bayes_opt":
            patches.enter_context(_bayes_opt_patched(seed, strategy == "bayes_opt_skipfail"))
        random.seed(seed)
        np.random.seed(seed)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results, _ = tune_kernel(_kernel_name(space), "", (1,), [], dict(space["tune_params"]),
                                     restrictions=[FunctionConstraint(listed_point)], cache=path,
                                     simulation_mode=True, strategy=kt_strategy, strategy_options=options,
                                     quiet=True, seed=seed)
    trace, seen = [], set()
    for r in results:
        key = tuple(r[n] for n in names)
        if key in seen:                           # served again from the cache: not an evaluation
            continue
        seen.add(key)
        trace.append(None if "__error__" in r else float(r["time"]))
    return trace[:budget]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Print the trace of one Kernel Tuner strategy on a recorded space.")
    ap.add_argument("space", help="a recorded space, e.g. tests/data/spaces/NAME.json")
    ap.add_argument("--strategy", default="random_sample", help=f"one of {', '.join(STRATEGIES)} (default random_sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=100)
    a = ap.parse_args(argv)
    try:
        import kernel_tuner  # noqa: F401
    except ImportError:
        print("kt_replay.py: Kernel Tuner is not installed: pip install -e '.[bench]'.", file=sys.stderr)
        return 1
    space = json.loads(Path(a.space).read_text())
    for i, t in enumerate(kernel_tuner_trace(space, a.strategy, a.seed, a.budget), 1):
        print(i, "failed" if t is None else f"{t:.6g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
