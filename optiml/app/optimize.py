"""``run_optimize``: the search wired to the runner, the proposers and the trace store, with no
click in it (the ``optiml optimize`` command and a notebook call the same function).

A new run records the spec and kernel, then searches. ``resume=RUN`` rebuilds the tree of a
stored run (nothing stored is evaluated again; a candidate a killed process left running is
evaluated first) and goes on to the run's budget or a new one. At the end the best verified
kernel is verified again on fresh inputs and timed interleaved with the seed by the same runner:
that figure is the one reported and stored with the run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from loguru import logger

from ..errors import UserError
from ..status import Status

# The runner, the search and the store (sqlite_utils, pandas) are imported where they are used,
# so that `optiml --help`, which imports this module for its types, stays light.



@dataclass(frozen=True)
class OptimizeOptions:
    kernel: Path | None = None             # None with resume: the run's own
    spec: Path | None = None
    budget: int | None = None              # None: 200, or the resumed run's
    time_limit_s: float | None = None
    seed: int = 0
    seed_kernels: tuple[Path, ...] = ()
    proposer: str = "rules"
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_timeout_s: float = 120.0
    resume: int | None = None
    profile: bool = True
    db: Path = Path("optiml.db")
    arch: str | None = None
    timeout_s: float = 120.0
    gpus: str = "all"
    parallel: int | None = None            # None: 16 per GPU
    build_jobs: int | None = None
    cluster: str | None = None
    output: Path | None = None             # None: KERNEL.optiml.cu
    sanitize: str | None = None            # compute-sanitizer: each new best ("best"), every verified ("all"),
                                           # "off"; None: "best", or a resumed run's own


@dataclass(frozen=True)
class OptimizeResult:
    run_id: int
    evaluations: int
    best_source: str
    best_path: tuple[str, ...]
    final: dict                             # the interleaved re-timing (status, seed_ms, best_ms, speedup, ...)
    output: Path
    sanitize: str = "best"                  # the compute-sanitizer mode the run used

    @property
    def speedup(self) -> float:
        """The final interleaved figure, or the search's own when the final timing failed."""
        f = self.final
        if f.get("status") == "ok":
            return f["speedup"]
        return f["search_seed_ms"] / f["search_best_ms"] if f.get("search_seed_ms") and f.get("search_best_ms") else 1.0


Progress = Callable[[int, int, "float | None"], None]
"""``on_progress(done, total, best_speedup)`` after every finished candidate."""


@dataclass(frozen=True)
class Finished:
    """One finished candidate, as a line of a run's log says it."""
    done: int                     # candidates finished so far (this one included)
    total: int
    node: int                     # its id in the trace store
    edit: str
    status: str
    message: str
    median_ms: float | None
    speedup: float | None         # over the seed, in the search's own timing

    def line(self) -> str:
        figure = f"{self.median_ms:.4g} ms {self.speedup:.2f}x" if self.median_ms and self.speedup else (
            f"{self.median_ms:.4g} ms" if self.median_ms else "")
        why = "" if self.status == "ok" or not self.message else f" ({' '.join(self.message.split())[:120]})"
        head = " ".join(x for x in (f"[{self.done}/{self.total}] node {self.node} {self.status}{why}", figure) if x)
        return f"{head}  {' '.join((self.edit or 'the seed').split())}"


class Interrupted(Exception):
    """The user stopped run ``run_id`` (Ctrl-C): it is stored as interrupted and can be resumed."""

    def __init__(self, run_id: int):
        super().__init__(f"run {run_id} interrupted")
        self.run_id = run_id


def make_proposer(kind: str, llm_model: str | None, llm_base_url: str | None, llm_timeout: float,
                  spec=None):
    """The proposer by name; with a ``spec`` that declares ``[tune]``, the rules search its space."""
    from ..edits.rules import RulesProposer

    space = dict(space=spec.tune, size_sets=spec.all_size_sets) if spec is not None and spec.tune else {}
    if kind == "rules":
        return RulesProposer(**space)
    from ..edits.llm import LLMConfig, LLMProposer

    llm = LLMProposer.from_config(LLMConfig.from_env(model=llm_model, base_url=llm_base_url, timeout_s=llm_timeout))
    if kind == "llm":
        return llm
    from ..edits.mixed import MixedProposer

    return MixedProposer([RulesProposer(**space), llm])


def run_optimize(opts: OptimizeOptions, on_progress: Progress | None = None,
                 on_search_end: Callable[[], None] | None = None,
                 on_candidate: Callable[[Finished], None] | None = None) -> OptimizeResult:
    """Search, re-time the best against the seed, write it; raises UserError for what a user can fix.
    ``on_progress(done, total, best_speedup)`` follows the search, ``on_candidate(Finished)`` tells
    each finished candidate; ``on_search_end()`` comes when it stops (interrupted too), before the
    final timing. Ctrl-C once the run is stored raises :class:`Interrupted` (the run is kept, as
    ``interrupted``); a new database this call created is removed when it fails before a run starts."""
    fresh = opts.resume is None and not Path(opts.db).exists()
    state: dict = {"store": None, "run": None}
    try:
        return _run_optimize(opts, on_progress, on_search_end, on_candidate, state)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt) and state["run"] is not None:
            try:
                state["store"].set_run_status(state["run"], "interrupted")
            except Exception:        # the store may be mid-write; the run is resumable either way
                pass
            raise Interrupted(state["run"]) from None
        if fresh and state["run"] is None:
            if state["store"] is not None:
                state["store"].close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(str(opts.db) + suffix).unlink(missing_ok=True)
        raise


def _run_optimize(opts: OptimizeOptions, on_progress, on_search_end, on_candidate, state: dict) -> OptimizeResult:
    from ..build import nvcc_version, resolve_arch
    from ..gpus import gpu_facts, parse_gpus, require_gpu, visible_gpus
    from ..runner import Preparer, Runner, standard_stages
    from ..search.mcts import MCTS, SearchConfig
    from ..spec import load_spec, load_task, read_kernel
    from ..traces.store import TraceStore
    from .evaluator import RunnerEvaluator
    from .records import StoreObserver, resume_search

    if opts.sanitize not in (None, "best", "all", "off"):
        raise UserError(f"--sanitize takes best, all or off, not {opts.sanitize!r}.")
    if opts.budget is not None and opts.budget < 1:
        raise UserError(f"--budget must be at least 1, not {opts.budget}.")
    for flag, value in (("--parallel", opts.parallel), ("--jobs", opts.build_jobs)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, not {value}.")
    store = state["store"] = TraceStore(opts.db, create=opts.resume is None)
    kernel, proposer, seed, profile = opts.kernel, opts.proposer, opts.seed, opts.profile
    llm_model, llm_base_url = opts.llm_model, opts.llm_base_url
    if opts.resume is None:
        if kernel is None:
            raise UserError("give the KERNEL to optimize, or --resume RUN to continue a stored run.")
        budget = 200 if opts.budget is None else opts.budget
        source, spec = load_task(kernel, opts.spec)
        seeds = [read_kernel(p) for p in opts.seed_kernels]
        sanitize = opts.sanitize or "best"
        config = {"budget": budget, "seed": seed, "proposer": proposer, "profile": profile, "sanitize": sanitize,
                  "kernel": str(kernel.resolve()), "spec": str(spec.path.resolve()), "llm_model": llm_model,
                  "llm_base_url": llm_base_url}
    else:
        run = store.run(opts.resume)
        config = dict(run["config"] or {})
        if opts.seed_kernels:
            raise UserError("--seed-kernel joins a new run; a resumed run keeps its own seed kernels.")
        kernel = kernel or Path(config.get("kernel") or "")
        spec_file = opts.spec or Path(config.get("spec") or "")
        if not spec_file.is_file():
            raise UserError(f"run {opts.resume}'s spec {spec_file} is gone; pass --spec with the same spec.")
        if spec_file.read_text() != run["spec_toml"]:
            raise UserError(f"{spec_file} changed since run {opts.resume} started; its results would not compare "
                            f"(start a new run).")
        source = run["kernel_source"]
        spec = load_spec(spec_file, kernel, kernel_source=source)
        seeds = []
        seed, proposer = int(config.get("seed") or run["seed"] or 0), config.get("proposer", "rules")
        profile = profile and config.get("profile", True)
        sanitize = opts.sanitize or config.get("sanitize") or "best"
        llm_model = llm_model or config.get("llm_model")
        llm_base_url = llm_base_url or config.get("llm_base_url")
        budget = opts.budget if opts.budget is not None else int(run["budget"] or config.get("budget") or 200)
    from ..edits.hygiene import IncludeGuard

    # a proposal may not include what the seed does not (nvcc echoes included files into its log)
    prop = IncludeGuard(make_proposer(proposer, llm_model, llm_base_url, opts.llm_timeout_s, spec), source,
                        include_dirs=[kernel.resolve().parent])
    require_gpu("optimize")
    devices = parse_gpus(opts.gpus, visible_gpus())
    parallel = opts.parallel or 16 * len(devices)
    prep = Preparer(spec, source, _builder(resolve_arch(opts.arch), opts.cluster), include_dir=kernel.resolve().parent,
                    kernel_name=kernel.name)
    if opts.resume is None:
        device, driver = gpu_facts()
        run_id = state["run"] = store.start_run(spec.entry, spec_toml=spec.path.read_text(), kernel_source=source,
                                                config=config, seed=seed, budget=budget, device=device,
                                                nvcc_version=nvcc_version(), driver_version=driver)
    else:
        run_id = state["run"] = opts.resume
        store.set_run_budget(run_id, budget)
        store.set_run_status(run_id, "running")
    from ..profiler.ncu import NcuProfiler
    from ..verify.worker_client import WorkerHarness

    sanitizer = None
    if sanitize != "off":
        from ..verify.sanitizer import Sanitizer

        sanitizer = Sanitizer()
    stages = standard_stages(prep, NcuProfiler() if profile else None, sanitizer=sanitizer,
                             sanitize=sanitize if sanitizer is not None else "asked")
    with Runner(stages, devices, harness_factory=lambda d: WorkerHarness(d, timeout_s=opts.timeout_s),
                build_workers=opts.build_jobs) as runner:
        evaluator = RunnerEvaluator(runner)
        cfg = SearchConfig(budget=budget, time_limit_s=opts.time_limit_s, seed=seed, parallel=parallel)
        if opts.resume is not None:
            search = resume_search(store, run_id, evaluator, prop, config=cfg, task=spec.summary(), entry=spec.entry)
            if store.nodes(run_id, "running"):
                raise UserError(f"run {run_id} is being searched by another live optiml process; wait for it or stop it.")
        else:
            search = MCTS(source, evaluator, prop, seed_sources=seeds, config=cfg,
                          observer=StoreObserver(store, run_id, evaluator), task=spec.summary(), entry=spec.entry)
        store_ids = search.observer.ids          # search node id -> store node id
        try:
            best = _search(store, run_id, search, evaluator, budget, opts.resume is not None, on_progress, on_candidate)
        finally:
            if on_search_end is not None:
                on_search_end()
        root = search.root
        if root.status != Status.OK:
            store.set_run_status(run_id, "failed")
            raise UserError(f"{kernel}: the kernel itself does not verify ({root.status}: "
                            f"{root.result.message}); fix it first.")
        t0 = time.perf_counter()
        best, final = sanitized_final(runner, search, best, sanitize=sanitizer is not None)
        logger.info("final timing{} in {:.2f} s", " and sanitizing" if sanitizer is not None else "",
                    time.perf_counter() - t0)
    if best is not None:
        final["best_node"] = store_ids[best.id]
    store.set_run_result(run_id, final)
    store.set_run_status(run_id, "done")
    if best is None:
        raise UserError(f"{kernel}: no safe kernel to write: {final['message']}")
    from ..traces.kernel_file import kernel_file

    out = opts.output or kernel.with_suffix(".optiml.cu")
    timed = final.get("status") == "ok" and final.get("speedup")
    text = kernel_file(store, run_id, final["best_node"],
                       **({k: final.get(k) for k in ("speedup", "seed_ms", "best_ms")} if timed else {}))
    try:
        out.write_text(text)
    except OSError as e:
        raise UserError(f"{out}: cannot write the best kernel ({e.strerror}); it is kept in the database: "
                        f"optiml best {run_id} -o FILE") from None
    return OptimizeResult(run_id=run_id, evaluations=search.evaluations, best_source=best.source,
                          best_path=tuple(best.path()), output=out, final=final, sanitize=sanitize)


def _builder(arch: str, cluster: str | None):
    if cluster:
        from ..cluster import DaskBuilder

        return DaskBuilder.connect(cluster, arch)
    from ..build import NvccBuilder

    return NvccBuilder(arch)


def _search(store, run_id: int, search, evaluator, budget: int, resumed: bool, on_progress: Progress | None,
            on_candidate=None):
    """Run the search, telling ``on_progress`` and ``on_candidate`` after every finished candidate."""
    ok = [n.median_ms for n in search.nodes if n.status == Status.OK and n.median_ms]
    state = {"root": search.root.median_ms, "best": min(ok) if ok else None, "done": 0}
    total = max(0, budget - search.evaluations) + (0 if resumed else 1)

    def on_done(ev, result):
        if ev.ok and ev.median_ms:
            state["root"] = state["root"] or ev.median_ms
            state["best"] = min(state["best"] or ev.median_ms, ev.median_ms)
        state["done"] += 1
        if on_progress is not None:
            on_progress(state["done"], total, state["root"] / state["best"] if state["root"] and state["best"] else None)

    evaluator.on_done = on_done
    if on_candidate is not None:
        from .records import Tee

        class Lines:
            """Tells ``on_candidate`` of each evaluated node (after the store has it)."""

            told = 0      # on_done runs for a whole batch of results before the search takes them

            def on_node_evaluated(self, node):
                root = search.root.median_ms
                ms = node.result.median_ms if node.status == Status.OK else None
                self.told += 1
                on_candidate(Finished(self.told, total, store_ids.get(node.id, node.id), node.edit,
                                      str(node.status), str(node.result.message or ""), ms,
                                      root / ms if root and ms else None))

            def on_node_added(self, node):
                pass

            on_node_started = on_node_amended = on_node_added

            def on_attempt(self, parent, record):
                pass

        store_ids = search.observer.ids
        search.observer = Tee(search.observer, Lines())
    if on_progress is not None:
        on_progress(0, total, state["root"] / state["best"] if state["root"] and state["best"] else None)
    try:
        return search.run()
    except KeyboardInterrupt:
        store.set_run_status(run_id, "interrupted")
        raise


def sanitized_final(runner, search, best, sanitize: bool = False):
    """The final figure of the search's ``best`` (:func:`final_timing`); with ``sanitize``, a best
    that compute-sanitizer finds unsafe now is marked so in the search (and its store) and the next
    best is taken, until one passes. Returns (best, final); best is None when every verified
    candidate, the seed too, is unsafe."""
    root = search.root
    while True:
        if best is None:        # only the seed verified, and it is unsafe
            seed = (root.result.sanitize or {}).get("message") or "unsafe under compute-sanitizer"
            return None, {"status": str(Status.UNSAFE), "search_seed_ms": root.median_ms,
                          "message": f"the seed is unsafe ({seed}) and no faster candidate is safe",
                          "sanitize": dict(root.result.sanitize or {})}
        final = final_timing(runner, root, best, sanitize=sanitize)
        verdict = final.get("sanitize") or {}
        if verdict.get("status") != "unsafe":
            return best, final
        message = verdict.get("message") or "unsafe under compute-sanitizer"
        search.amend(best, replace(best.result, status=Status.UNSAFE, message=message, sanitize=verdict))
        logger.warning("the best candidate (node {}) is unsafe: {}", best.id, message)
        best = search.best()


def final_timing(runner, root, best, sanitize: bool = False) -> dict:
    """The best kernel (a search Node) verified again on fresh inputs, then timed interleaved with the
    seed (the root) by ``runner``, in one job; with ``sanitize``, also under compute-sanitizer unless
    the search already sanitized it (``final["sanitize"]`` is the verdict either way)."""
    from ..runner import Candidate

    base = {"search_seed_ms": root.median_ms, "search_best_ms": best.median_ms, "best_edits": list(best.path())}
    known = dict(best.result.sanitize) if best.result.sanitize else None
    again = sanitize and (known is None or known.get("status") != "clean")
    if best is root and not again:
        return base | {"status": "ok", "message": "the seed is the best", "seed_ms": root.median_ms,
                       "best_ms": root.median_ms, "speedup": 1.0, "sanitize": known}
    candidate = Candidate(best.source, tuple(best.flags), name="best.cu")
    # sanitized in a job of its own, at the same time: the tools start up while the timing runs
    checked = runner.submit(candidate, profile=False, time_it=False, sanitize=True) if again else None
    ev = runner.evaluate(candidate, profile=False, baseline=Candidate(root.source, tuple(root.flags), name="seed.cu"),
                         sanitize=False)
    if checked is not None:
        sev = checked.result()
        sev = sev.later.result() if sev.later is not None else sev
        known = sev.sanitize.to_dict() if sev.sanitize is not None else {
            "status": "not_sanitized", "message": f"it did not verify for compute-sanitizer ({sev.status}: {sev.message})"}
    verdict = known
    if not ev.ok or not ev.median_ms or not ev.baseline_ms:
        return base | {"status": str(ev.status), "message": ev.message, "sanitize": verdict}
    if best is root:
        return base | {"status": "ok", "message": "the seed is the best", "seed_ms": root.median_ms,
                       "best_ms": root.median_ms, "speedup": 1.0, "sanitize": verdict}
    return base | {"status": "ok", "message": "", "seed_ms": ev.baseline_ms, "best_ms": ev.median_ms,
                   "speedup": ev.baseline_ms / ev.median_ms, "seed": ev.seed, "sanitize": verdict}
