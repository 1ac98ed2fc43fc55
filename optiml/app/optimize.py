"""``run_optimize``: the search wired to the runner, the proposers and the trace store, with no
click in it (the ``optiml optimize`` command and a notebook call the same function).

A new run records the spec and kernel, then searches. ``resume=RUN`` rebuilds the tree of a
stored run (nothing stored is evaluated again; a candidate a killed process left running is
evaluated first) and goes on to the run's budget or a new one. At the end the verified
candidates within the fastest one's noise band (at most four) are verified again on fresh inputs
and timed interleaved with the seed, in blocks, in one job of the same runner; the kernel is
chosen from that measurement (fewest edits among those that tie), and its figure, with the
speedup's interval, is the one reported and stored with the run (:func:`final_timing`).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
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
    focus: float = 3.0                     # SearchConfig.focus (0: off)
    build_jobs: int | None = None
    cluster: str | None = None
    output: Path | None = None             # None: KERNEL.optiml.cu
    sanitize: str | None = None            # compute-sanitizer: each new best ("best"), every verified ("all"),
                                           # "off"; None: "best", or a resumed run's own
    templates: bool = True                 # the rules may offer an operation template at the root
    tf32: bool = False                     # ... and fp32 GEMMs the TF32 tensor-core one


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

    def line(self) -> str:
        """The final line of ``optiml optimize``: ``run N: C candidates; best S.SSx (95 % LOW-HIGHx
        over R rounds; SEED -> BEST ms, ...); path: ...; written to ...``."""
        final = self.final
        if final.get("status") == "ok":
            low, high = final.get("speedup_low"), final.get("speedup_high")
            interval = (f"95 % {low:.2f}-{high:.2f}x over {final.get('speedup_rounds')} rounds; "
                        if low and high else "")
            timed = [c for c in final.get("compared") or () if c.get("median_ms")]
            among = f", chosen among {len(timed)} timed together" if len(timed) > 1 else ""
            figure = (f"{final['speedup']:.2f}x ({interval}{final['seed_ms']:.4f} -> {final['best_ms']:.4f} ms, "
                      f"re-verified and timed interleaved with the seed{among})")
        else:
            figure = (f"{self.speedup:.2f}x during the search; the final interleaved re-timing "
                      f"failed ({final.get('status')}: {final.get('message')})")
        from ..traces.limits import baseline_text, sol_text

        limits = "".join(f"; {t}" for t in (sol_text(final), baseline_text(final)) if t)
        stopped = f"\n{final['stopped']}" if final.get("stopped") else ""
        return (f"run {self.run_id}: {self.evaluations} candidates; best {figure}{limits}; "
                f"path: {'; '.join(self.best_path) or 'the seed itself'}; written to {self.output}{stopped}")


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
                  spec=None, source: str | None = None, templates: bool = False, arch: str | None = None,
                  tf32: bool = False):
    """The proposer by name; with a ``spec`` that declares ``[tune]``, the rules search its space;
    with ``templates`` (and the seed's ``source``), they may offer an operation template at the root
    (those that run on ``arch``, when it is known; the TF32 GEMM template with ``tf32``)."""
    from ..edits.rules import RulesProposer

    rules = {}                                      # what the rules know of the spec
    if spec is not None and spec.tune:              # its declared space
        rules = dict(space=spec.tune, size_sets=spec.all_size_sets)
    elif spec is not None:                          # its launch: a literal block may become a knob
        rules = dict(launch=(spec.launch.grid, spec.launch.block, spec.launch.shared_mem))
    if templates and spec is not None and source is not None and not spec.tune:
        from ..edits.templates import template_transforms

        rules["templates"] = (source, *template_transforms(source, spec.entry, spec, arch=arch, tf32=tf32))
    if kind == "rules":
        return RulesProposer(**rules)
    from ..edits.llm import LLMConfig, LLMProposer

    llm = LLMProposer.from_config(LLMConfig.from_env(model=llm_model, base_url=llm_base_url, timeout_s=llm_timeout))
    if kind == "llm":
        return llm
    from ..edits.mixed import MixedProposer

    return MixedProposer([RulesProposer(**rules), llm])


def run_optimize(opts: OptimizeOptions, on_progress: Progress | None = None,
                 on_search_end: Callable[[], None] | None = None,
                 on_candidate: Callable[[Finished], None] | None = None) -> OptimizeResult:
    """Search, re-time the best against the seed, write it; raises UserError for what a user can fix.
    ``on_progress(done, total, best_speedup)`` follows the search, ``on_candidate(Finished)`` tells
    each finished candidate; ``on_search_end()`` comes when it stops (interrupted too), before the
    final timing. Ctrl-C once the run is stored raises :class:`Interrupted` (the run is kept, as
    ``interrupted``); a new database this call created is removed when it fails before a run starts."""
    return stored_run(opts.db, opts.resume,
                      lambda state: _run_optimize(opts, on_progress, on_search_end, on_candidate, state))


def stored_run(db, resume, body):
    """``body(state)``, which puts the store and the run id in ``state`` as it opens them: Ctrl-C
    once the run is stored raises :class:`Interrupted` (the run kept, as ``interrupted``); a new
    database this call created is removed when it fails before a run starts. For ``optimize`` and
    ``generate``."""
    fresh = resume is None and not Path(db).exists()
    state: dict = {"store": None, "run": None}
    try:
        return body(state)
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
                Path(str(db) + suffix).unlink(missing_ok=True)
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
                  "llm_base_url": llm_base_url, "templates": opts.templates, "tf32": opts.tf32}
    else:
        run = store.run(opts.resume)
        config = dict(run["config"] or {})
        if config.get("generate"):
            raise UserError(f"run {opts.resume} is an optiml generate run (its root is a description, not a kernel); "
                            f"resume it with: optiml generate --resume {opts.resume} --db {opts.db}")
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
    gpus = _gpu_cluster(opts.cluster, opts.timeout_s)      # with --cluster: its GPU workers evaluate
    if gpus is None:
        require_gpu("optimize")
    devices = parse_gpus(opts.gpus, visible_gpus()) if gpus is None else gpus.slots
    parallel = opts.parallel or 16 * (len(devices) if gpus is None else len(gpus.workers))
    arch = resolve_arch(opts.arch or (gpus.arch if gpus is not None else None))
    from ..edits.hygiene import IncludeGuard

    # a proposal may not include what the seed does not (nvcc echoes included files into its log)
    try:
        prop = IncludeGuard(make_proposer(proposer, llm_model, llm_base_url, opts.llm_timeout_s, spec, source=source,
                                          templates=config.get("templates", False), arch=arch,
                                          tf32=config.get("tf32", False)), source,
                            include_dirs=[kernel.resolve().parent])
    except BaseException:
        if gpus is not None:             # a bad LLM setting, say: the cluster's client is not left open
            gpus.close()
        raise
    if gpus is None and (spec.flops is not None or spec.bytes is not None):   # speed of light: measured peaks
        ensure_calibrated(arch)
    prep = Preparer(spec, source, _builder(arch, gpus), include_dir=kernel.resolve().parent,
                    kernel_name=kernel.name)
    if opts.resume is None:
        device, driver = gpu_facts() if gpus is None else (gpus.name, gpus.driver)
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

        sanitizer = Sanitizer() if gpus is None else gpus.sanitizer()
    profiler = None if not profile else NcuProfiler() if gpus is None else gpus.profiler()
    stages = standard_stages(prep, profiler, sanitizer=sanitizer, sanitize=sanitize if sanitizer is not None else "asked")
    harness = (lambda d: WorkerHarness(d, timeout_s=opts.timeout_s)) if gpus is None else gpus.harness
    with gpus if gpus is not None else nullcontext(), \
            Runner(stages, devices, harness_factory=harness, build_workers=opts.build_jobs) as runner:
        evaluator = RunnerEvaluator(runner)
        cfg = SearchConfig(budget=budget, time_limit_s=opts.time_limit_s, seed=seed, parallel=parallel, focus=opts.focus)
        if opts.resume is not None:
            search = resume_search(store, run_id, evaluator, prop, config=cfg, task=spec.summary(), entry=spec.entry)
            if store.nodes(run_id, "running"):
                raise UserError(f"run {run_id} is being searched by another live optiml process; wait for it or stop it.")
        else:
            search = MCTS(source, evaluator, prop, seed_sources=seeds, config=cfg,
                          observer=StoreObserver(store, run_id, evaluator), task=spec.summary(), entry=spec.entry)
        store_ids = search.observer.ids          # search node id -> store node id
        try:
            best = _search(search, evaluator, budget, opts.resume is not None, on_progress, on_candidate)
        finally:
            if on_search_end is not None:
                on_search_end()
        root = search.root
        if root.status != Status.OK:
            store.set_run_status(run_id, "failed")
            raise UserError(f"{kernel}: the kernel itself does not verify ({root.status}: "
                            f"{root.result.message}); fix it first.")
        t0 = time.perf_counter()
        vendor = None
        if spec.baseline is not None:      # timed with the best in its final job, at the same clocks
            from ..verify.harness import FunctionRef
            vendor = FunctionRef(spec.baseline.framework, str(spec.baseline.path), spec.baseline.function)
        best, final = sanitized_final(runner, search, best, sanitize=sanitizer is not None, ids=store_ids, vendor=vendor)
        stopped = stop_sentence(search, budget, opts.proposer)
        if stopped:
            final["stopped"] = stopped
            logger.warning("{}", stopped)
        logger.info("final timing{} in {:.2f} s", " and sanitizing" if sanitizer is not None else "",
                    time.perf_counter() - t0)
        if best is not None and spec.baseline is not None:
            t0 = time.perf_counter()
            final["baseline"] = merge_interleaved(time_baseline(runner, spec, root.source), final.get("vendor"))
            logger.info("baseline {} verified and timed in {:.2f} s: {}", spec.baseline.label, time.perf_counter() - t0,
                        final["baseline"].get("median_ms") or final["baseline"].get("message"))
    if best is not None:
        final["best_node"] = store_ids[best.id]
        sol = speed_of_light_figure(spec, best.source, final, (gpu_facts()[0] if gpus is None else gpus.name) or "")
        if sol is not None:
            final["speed_of_light"] = sol
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


def speed_of_light_figure(spec, source: str, final: dict, device: str, peaks=None) -> dict | None:
    """The best's fraction of speed of light for the final dict (``speed_of_light``): the spec's
    counts at the timing size with the best source's constants, at the peaks ``optiml calibrate``
    measured (else the datasheet's: ``peaks_for``); None without counts, peaks or a final time."""
    from ..profiler.calibration import peaks_for, speed_of_light
    from ..source import parse_source

    if final.get("status") != "ok" or not final.get("best_ms"):
        return None
    try:
        constants = parse_source(source).constants
        flops = spec.count("flops", spec.timing_sizes, constants)
        nbytes = spec.count("bytes", spec.timing_sizes, constants)
    except UserError as e:
        logger.warning("no speed-of-light figure: {}", e)
        return None
    dtype = next((a.dtype for a in spec.args if a.role in ("input", "inout")), None)
    sol = speed_of_light(final["best_ms"], flops, nbytes, peaks if peaks is not None else peaks_for(device), dtype)
    return sol.to_dict() if sol is not None else None


def _gpu_cluster(address: str | None, timeout_s: float):
    """``--cluster``: the GPU workers of the dask cluster at ``address`` (each candidate's whole
    evaluation runs on one of them), or None to evaluate on this host's GPUs."""
    if not address:
        return None
    from ..cluster import GpuCluster

    return GpuCluster.connect(address, timeout_s=timeout_s)


def _builder(arch: str, cluster=None):
    """nvcc here, or on the dask cluster's workers: ``cluster`` the run's GpuCluster (its client), or
    a scheduler's address (builds only: ``optiml generate --cluster``)."""
    if isinstance(cluster, str) and cluster:
        from ..cluster import DaskBuilder

        return DaskBuilder.connect(cluster, arch)
    if cluster:
        return cluster.builder(arch)
    from ..build import NvccBuilder

    return NvccBuilder(arch)


def _search(search, evaluator, budget: int, resumed: bool, on_progress: Progress | None,
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
    return search.run()             # Ctrl-C: stored_run marks the run interrupted


def stop_sentence(search, budget: int, proposer: str) -> str | None:
    """One sentence when the search ended before its budget because nothing was left to propose:
    how many candidates of how many, why (every node's proposals tried, the rewrites refused and the
    commonest reason), and what would go further; None when the budget or the time limit ended it."""
    if getattr(search, "stopped", None) != "exhausted" or search.evaluations >= budget:
        return None
    from collections import Counter

    from ..edits.types import Attempt

    refused = [a for n in search.nodes for a in n.tried if isinstance(a, Attempt) and a.status == Status.REFUSED]
    failed = sum(1 for n in search.nodes if n.parent is not None and n.status != Status.OK)
    why = f"every proposal at every node was tried ({len(search.nodes) - 1} candidates, {failed} of them failed"
    if refused:
        reason, count = Counter(a.message.split(":")[0][:120] for a in refused).most_common(1)[0]
        why += f"; {len(refused)} rewrites refused, most often: {reason}" + (f" ({count}x)" if count > 1 else "")
    why += ")"
    further = ["--proposer llm or mixed (an OpenAI-compatible server)"] if proposer == "rules" else []
    further += ["a [tune] table in the spec (the kernel's tunables and their values)",
                "a hand-written --seed-kernel"]
    return (f"the search stopped after {search.evaluations} of {budget} candidates: nothing was left to propose, "
            f"{why}; to go further: {', or '.join(further)}.")


FINAL_CONTENDERS = 4      # at most this many candidates are timed against each other at the end


def contenders(search, best) -> list:
    """The search's nodes to time against each other at the end: the verified, safe ones within
    the fastest one's noise band by the search's own timings (:func:`optiml.best.in_band`), the
    fastest first and at most FINAL_CONTENDERS of them, with ``best`` (the search's pick) first
    (the seed among them when it is in the band)."""
    from ..best import Ranked, in_band

    ok = [n for n in search.nodes if n.status == Status.OK and n.median_ms and not n.unsafe]
    band = [r.key for r in in_band(Ranked(n, n.median_ms, n.spread, n.depth, n.id) for n in ok)]
    return [best] + [n for n in band if n is not best][:FINAL_CONTENDERS - 1]


def sanitized_final(runner, search, best, sanitize: bool = False, ids=None, vendor=None):
    """The final choice and figure (:func:`final_timing` of the search's ``best`` and the other
    :func:`contenders`). A chosen kernel found wrong by the final job's verification on fresh
    inputs (:func:`wrong_at_the_end`), or, with ``sanitize``, unsafe under compute-sanitizer, is
    marked so in the search (and its store) and the choice is made again without it, until one
    passes. Returns (chosen, final); chosen is None when every verified candidate, the seed too, is
    unsafe. ``ids``: the search's node ids as the store's (for the figure's words)."""
    root = search.root
    while True:
        if best is None:        # only the seed verified, and it is unsafe
            seed = (root.result.sanitize or {}).get("message") or "unsafe under compute-sanitizer"
            return None, {"status": str(Status.UNSAFE), "search_seed_ms": root.median_ms,
                          "message": f"the seed is unsafe ({seed}) and no faster candidate is safe",
                          "sanitize": dict(root.result.sanitize or {})}
        chosen, final = final_timing(runner, root, best, sanitize=sanitize, rivals=contenders(search, best), ids=ids,
                                     vendor=vendor)
        if wrong_at_the_end(search, root, chosen, final):
            best = search.best()
            continue
        verdict = final.get("sanitize") or {}
        if verdict.get("status") != "unsafe":
            return chosen, final
        message = verdict.get("message") or "unsafe under compute-sanitizer"
        search.amend(chosen, replace(chosen.result, status=Status.UNSAFE, message=message, sanitize=verdict))
        logger.warning("the chosen candidate (node {}) is unsafe: {}", chosen.id, message)
        best = search.best()


def wrong_at_the_end(search, seed, chosen, final: dict) -> bool:
    """Whether the final job, timed against ``seed`` (the search's root, or generate's slowest
    strategy), found ``chosen`` wrong on its fresh inputs (``wrong_output``: its own
    cases or its timed launches; a rival's failure leaves it out instead, and a fault or a timeout
    there may be the seed's, timed in the same job). Such a kernel is marked ``wrong_output`` in the
    search and its store, with the final job's message, so that it is never the kernel written."""
    if chosen is seed or final.get("status") != Status.WRONG_OUTPUT:
        return False
    message = f"wrong in the final re-verification on fresh inputs: {final.get('message') or ''}".rstrip(": ")
    search.amend(chosen, replace(chosen.result, status=Status.WRONG_OUTPUT, message=message))
    logger.warning("the chosen candidate (node {}) is {}", chosen.id, message)
    return True


def ensure_calibrated(arch: str) -> None:
    """Measure this GPU's peaks once per model, driver and clocks setting (``optiml calibrate``)
    when the cache has none, so that the run's speed-of-light figures are measured ones; a GPU
    nvidia-smi does not describe, or a failed measurement, leaves the datasheet's (and says so)."""
    from ..profiler.calibration import current_key, lookup

    key = current_key()
    if key is None or lookup(*key) is not None:
        return
    from .calibration import measure_and_save

    logger.info("calibrating {} (once per GPU model, driver and clocks setting: optiml calibrate)", key[0])
    try:
        measure_and_save(arch, key)         # the key just read: nvidia-smi is not asked again
    except Exception as e:          # a measurement that failed: the datasheet's peaks, as before
        logger.warning("calibrating the GPU failed ({}); speed-of-light figures use datasheet peaks", e)


def time_baseline(runner, spec, seed_source: str) -> dict:
    """The spec's ``[baseline]`` (a function on GPU arrays) verified against the reference on fresh
    inputs and timed as a kernel alone is, in one runner job (the seed's build gives the sizes'
    constants); what the run stores as ``final["baseline"]``: its label, framework, status and
    median (or the message of its failure)."""
    from ..runner import Candidate
    from ..verify.harness import FunctionRef

    b = spec.baseline
    ev = runner.evaluate(Candidate(seed_source, name="baseline.cu",
                                   function=FunctionRef(b.framework, str(b.path), b.function)),
                         profile=False, sanitize=False)
    out = {"label": b.label, "framework": b.framework, "status": str(ev.status)}
    timing = ev.harness.timing if ev.harness is not None else None
    if ev.ok and ev.median_ms:
        out["median_ms"] = ev.median_ms
        if timing is not None:
            out.update(reps=timing.reps, iqr_ms=timing.iqr_ms, flushed_l2=timing.flushed_l2)
    else:
        out["message"] = ev.message
    return out


def merge_interleaved(baseline: dict, vendor: dict | None) -> dict:
    """The baseline's figure: verified in its own job (``baseline``, :func:`time_baseline`) and, where
    the final job timed it interleaved with the best (``vendor``), that median, the one at the best's
    clocks (``timed: interleaved``; its own job's median kept as ``alone_ms``)."""
    if baseline.get("status") != "ok" or not (vendor or {}).get("median_ms"):
        return baseline
    return baseline | {"median_ms": vendor["median_ms"], "alone_ms": baseline.get("median_ms"),
                       "timed": "interleaved with the best in the final timing"}


def final_timing(runner, root, best, sanitize: bool = False, rivals=(), ids=None, vendor=None) -> tuple:
    """The final choice and figure. ``best`` (a search Node) and its ``rivals`` (other nodes
    within the fastest one's noise band: :func:`contenders`) are verified again on fresh inputs
    and timed interleaved with the seed (the root) by ``runner``, all in ONE job (``best``, or the
    first non-seed one, as the job's candidate; the seed as its baseline; the others as rivals).
    The band is then set again by that measurement (its fastest and its spread, with
    ``best.MIN_BAND``'s floor: :func:`optiml.best.choose_best`), and among those within it the
    fewest edits wins, then the faster, then the older. A rival that fails verification is left
    out; a job the rivals broke is run again with ``best`` alone. With ``sanitize``, the chosen
    one is also run under compute-sanitizer unless the search already sanitized it clean
    (``final["sanitize"]`` is the verdict either way; ``best``'s starts beside the timing).

    Returns (chosen node, final): ``final`` has the seed's and the chosen one's medians from the
    job, their ratio (``speedup``) and its 95 % interval over the rounds of the interleaved timing
    (``speedup_low``/``speedup_high``, :func:`optiml.verify.timing_stats.ratio_interval`; None
    without blocks), ``compared`` (each timed node's id, edits, median, spread and repetitions from
    this job, and its search median; a rival left out with its status), and ``clocks`` (the GPU's
    SM clock over the job, where NVML answered). ``ids`` (search node id -> the store's) names the
    nodes in ``compared`` and the message as the store does; without it, the search's ids.

    ``vendor`` (a :class:`~optiml.verify.harness.FunctionRef`: the spec's [baseline]) is timed in the
    same job, interleaved with them, so that the comparison with it is at the same clocks
    (``final["vendor"]``: its median, spread and repetitions); a job it breaks is run again without it."""
    from ..best import Ranked, choose_best
    from ..runner import Candidate
    from ..verify.timing_stats import ratio_interval

    def job_of(node, name):
        return Candidate(node.source, tuple(node.flags), name=name)

    checked: dict = {}

    def label(node) -> int:
        return ids.get(node.id, node.id) if ids else node.id

    def verdict(node):
        known = dict(node.result.sanitize) if node.result.sanitize else None
        if not sanitize or (known is not None and known.get("status") == "clean"):
            return known
        fut = checked.get(node.id) or runner.submit(job_of(node, "best.cu"), profile=False, time_it=False,
                                                    sanitize=True)
        sev = fut.result()
        sev = sev.later.result() if sev.later is not None else sev
        return sev.sanitize.to_dict() if sev.sanitize is not None else {
            "status": "not_sanitized", "message": f"it did not verify for compute-sanitizer ({sev.status}: {sev.message})"}

    def figure(node, **kw):
        return {"search_seed_ms": root.median_ms, "search_best_ms": node.median_ms,
                "best_edits": list(node.path())} | kw

    group = [best] + [n for n in rivals if n is not best]
    timed = [n for n in group if n is not root]
    if not timed:
        return root, figure(root, status="ok", message="the seed is the best", seed_ms=root.median_ms,
                            best_ms=root.median_ms, speedup=1.0, sanitize=verdict(root))
    if sanitize and best is not root and (best.result.sanitize or {}).get("status") != "clean":
        # sanitized in a job of its own, at the same time: the tools start up while the timing runs
        checked[best.id] = runner.submit(job_of(best, "best.cu"), profile=False, time_it=False, sanitize=True)
    head, others = timed[0], timed[1:]
    seed = job_of(root, "seed.cu")

    def timed_job(head, others):
        nonlocal vendor
        kw = dict(profile=False, sanitize=False,
                  baseline=(seed, *(job_of(n, f"rival{i}.cu") for i, n in enumerate(others, 1))) if others else seed)
        ev = runner.evaluate(job_of(head, "best.cu"), **kw, **({"vendor": vendor} if vendor is not None else {}))
        if not ev.ok and vendor is not None:
            logger.warning("the final timing with the baseline interleaved failed ({}: {}); timing without it",
                           ev.status, ev.message)
            vendor = None
            ev = runner.evaluate(job_of(head, "best.cu"), **kw)
        return ev

    ev = timed_job(head, others)
    if not ev.ok and best is root:       # the seed stays, as it would without the others
        logger.warning("timing the candidates in the seed's band together failed ({}: {})", ev.status, ev.message)
        return root, figure(root, status="ok", message=f"the seed is the best (timing the candidates in its "
                            f"band together failed: {ev.status}: {ev.message})", seed_ms=root.median_ms,
                            best_ms=root.median_ms, speedup=1.0, sanitize=verdict(root))
    if others and not ev.ok:
        logger.warning("the final timing of {} candidates together failed ({}: {}); timing the best alone",
                       len(timed), ev.status, ev.message)
        head, others = best, []
        ev = timed_job(best, [])
    if not ev.ok or not ev.median_ms or not ev.baseline_ms:
        return best, figure(best, status=str(ev.status), message=ev.message, sanitize=verdict(best))
    hr = ev.harness
    seed_t = hr.baseline_timing if hr is not None and hr.baseline_timing is not None else _untimed(ev.baseline_ms)
    measured = [(head, hr.timing if hr is not None and hr.timing is not None else _untimed(ev.median_ms))]
    compared = [_compared(head, measured[0][1], label(head))]
    results = list(hr.rivals) if hr is not None else []
    for n, res in zip(others, results + [None] * (len(others) - len(results))):
        if res is not None and res.status == Status.OK and res.timing is not None:
            measured.append((n, res.timing))
            compared.append(_compared(n, res.timing, label(n)))
        else:
            compared.append({"node": label(n), "edits": n.depth, "search_ms": n.median_ms,
                             "status": str(res.status) if res is not None else "not_timed",
                             "message": res.message if res is not None else "the job gave no result for it"})
    if any(n is root for n in group):
        measured.append((root, seed_t))
        compared.append(_compared(root, seed_t, label(root)))
    pick = choose_best(Ranked(i, t.median_ms, _spread(t), n.depth, n.id) for i, (n, t) in enumerate(measured))
    chosen, chosen_t = measured[pick.key]
    extra = {"compared": compared, "clocks": hr.clocks if hr is not None else None, "seed": ev.seed}
    vt = hr.vendor_timing if hr is not None else None
    if vt is not None:
        extra["vendor"] = {"median_ms": vt.median_ms, "spread": round(vt.spread, 6), "reps": vt.reps}
    elif hr is not None and hr.vendor_message:
        extra["vendor"] = {"message": hr.vendor_message}
    if len(measured) > 1:
        extra["message"] = (f"{len(measured)} candidates within the noise band timed together: node {label(chosen)} "
                            f"({chosen.depth} edits) chosen")
    if chosen is root:
        return root, figure(root, status="ok", message="the seed is the best", seed_ms=seed_t.median_ms,
                            best_ms=seed_t.median_ms, speedup=1.0, sanitize=verdict(root)) | {
                                k: v for k, v in extra.items() if k != "message"}
    interval = ratio_interval(seed_t.blocks_ms, chosen_t.blocks_ms)
    return chosen, figure(chosen, status="ok", message="", seed_ms=seed_t.median_ms, best_ms=chosen_t.median_ms,
                          speedup=seed_t.median_ms / chosen_t.median_ms,
                          speedup_low=interval[1] if interval else None, speedup_high=interval[2] if interval else None,
                          speedup_rounds=min(len(seed_t.blocks_ms), len(chosen_t.blocks_ms)),
                          sanitize=verdict(chosen)) | extra


def _untimed(median_ms: float):
    """A timing known only by its median (a fake runner's evaluation without a harness result)."""
    from ..verify.harness import TimingResult

    return TimingResult(median_ms, median_ms, median_ms, median_ms, median_ms, median_ms, float("nan"), 0, 0, 0, False)


def _spread(t) -> float | None:
    """A timing's spread (IQR over median), None where it is not known."""
    return t.spread if t.spread == t.spread else None        # NaN: an _untimed one


def _compared(node, t, label: int) -> dict:
    """What the final comparison says of one timed node (``label``: its id as the store has it)."""
    spread = _spread(t)
    return {"node": label, "edits": node.depth, "median_ms": t.median_ms,
            "spread": round(spread, 6) if spread is not None else None, "reps": t.reps, "search_ms": node.median_ms}
