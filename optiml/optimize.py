"""``optiml optimize``: the search wired to the real pipeline, the proposers and the trace store.

A new run records the spec and kernel, then searches. ``--resume RUN`` rebuilds the tree of a
stored run (nothing stored is evaluated again; a candidate a killed process left running is
evaluated first) and goes on to the run's budget or a new one. At the end the best verified
kernel is verified again on fresh inputs and timed interleaved with the seed in one process:
that figure is the one reported and stored with the run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from .errors import UserError

PROPOSERS = ("rules", "llm", "mixed")


def _smi(*args: str) -> str:
    """nvidia-smi's output ("" without it, or when it fails)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        return subprocess.run([smi, *args], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _gpu_facts() -> tuple[str | None, str | None]:
    out = _smi("--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0").strip()
    name, _, driver = out.partition(",")
    return (name.strip() or None), (driver.strip() or None)


def visible_gpus() -> list[tuple[int, str]]:
    """(index, name) of every GPU nvidia-smi lists (CUDA_VISIBLE_DEVICES renumbers them from 0)."""
    out = _smi("--query-gpu=index,name", "--format=csv,noheader")
    rows = [ln.split(",", 1) for ln in out.strip().splitlines() if "," in ln]
    gpus = [(i, name.strip()) for i, (_, name) in enumerate(rows)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() not in ("", "all"):
        picked = [v.strip() for v in visible.split(",") if v.strip()]
        by_index = {str(i): name for i, (_, name) in enumerate(rows)}
        gpus = [(n, by_index.get(v, "GPU")) for n, v in enumerate(picked)]
    return gpus


def parse_gpus(text: str, visible: list[tuple[int, str]]) -> list[int]:
    """``--gpus``: "all", or CUDA ordinals like "0,2". GPUs of different models are refused:
    candidates timed on one would be compared with candidates timed on the other."""
    names = dict(visible)
    if text.strip() == "all":
        chosen = sorted(names)
        if not chosen:
            raise UserError("--gpus all: nvidia-smi lists no GPU.")
    else:
        try:
            chosen = sorted({int(x) for x in text.split(",") if x.strip()})
        except ValueError:
            raise UserError(f"--gpus takes \"all\" or GPU numbers like 0,1, not {text!r}.") from None
        if not chosen:
            raise UserError("--gpus names no GPU.")
        missing = [g for g in chosen if names and g not in names]
        if missing:
            raise UserError(f"--gpus {text}: no GPU {missing[0]} here (visible: {', '.join(map(str, sorted(names))) or 'none'}).")
    models = {names.get(g) for g in chosen if names.get(g)}
    if len(models) > 1:
        raise UserError(f"--gpus {text} mixes GPU models ({', '.join(sorted(models))}); their timings would not "
                        f"compare; choose GPUs of one model.")
    return chosen


def make_proposer(kind: str, llm_model: str | None, llm_base_url: str | None, llm_timeout: float):
    from .edits.rules import RulesProposer

    if kind == "rules":
        return RulesProposer()
    from .edits.llm import LLMConfig, LLMProposer

    cfg = LLMConfig.from_env(model=llm_model, base_url=llm_base_url, timeout_s=llm_timeout)
    llm = LLMProposer.from_config(cfg)
    if kind == "llm":
        return llm
    from .edits.mixed import MixedProposer

    return MixedProposer([RulesProposer(), llm])


@click.command()
@click.argument("kernel", type=click.Path(path_type=Path), required=False)
@click.option("--spec", "spec_path", type=click.Path(path_type=Path), help="Task spec (default: kernel.toml beside the kernel).")
@click.option("--budget", type=int, help="Candidates to evaluate in all (default 200; with --resume, the run's own).")
@click.option("--time-limit", type=float, help="Stop searching after this many seconds.")
@click.option("--seed", default=0, show_default=True, help="Seed for the search (reproducible with the rules proposer).")
@click.option("--seed-kernel", "seed_kernels", multiple=True, type=click.Path(path_type=Path),
              help="A hand-written variant to join the search as a child of the root (repeatable).")
@click.option("--proposer", type=click.Choice(PROPOSERS), default="rules", show_default=True,
              help="Where edits come from: built-in profile-guided rules (offline), an LLM, or both.")
@click.option("--llm-model", envvar="OPTIML_LLM_MODEL", help="LLM model name (also $OPTIML_LLM_MODEL).")
@click.option("--llm-base-url", envvar="OPTIML_LLM_BASE_URL",
              help="OpenAI-compatible server, e.g. http://localhost:11434/v1 (also $OPTIML_LLM_BASE_URL); "
                   "the key comes from $OPTIML_LLM_API_KEY or $OPENAI_API_KEY.")
@click.option("--llm-timeout", default=120.0, show_default=True, help="Seconds before an LLM request is abandoned.")
@click.option("--resume", "resume_run", type=int, metavar="RUN", help="Continue run RUN of the database.")
@click.option("--no-profile", is_flag=True, help="Do not run Nsight Compute (runtime alone).")
@click.option("--db", type=click.Path(path_type=Path), envvar="OPTIML_DB", default="optiml.db", show_default=True,
              help="Trace database (also $OPTIML_DB).")
@click.option("--arch", help="GPU architecture, e.g. sm_90 (default: the GPU's).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds before a GPU child is killed.")
@click.option("--gpus", default="all", show_default=True,
              help="GPUs to evaluate on, e.g. 0,1: one persistent worker each; candidates go to whichever is free. "
                   "ncu profiles one GPU of a host at a time (the driver serialises it), so with profiling a second "
                   "GPU adds ~10-25 %; with --no-profile, ~2x.")
@click.option("--parallel", type=int, help="Candidates in flight at once (default 16 per GPU; 1 = one at a time).")
@click.option("--jobs", "build_jobs", type=int, help="nvcc builds at once (default: CPU cores - 1).")
@click.option("--cluster", metavar="ADDRESS", envvar="OPTIML_CLUSTER",
              help="Dask scheduler (tcp://host:8786) whose workers build the candidates (needs the dask extra).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to write the best kernel (default: KERNEL.optiml.cu).")
def optimize(kernel: Path | None, spec_path: Path | None, budget: int | None, time_limit: float | None, seed: int,
             seed_kernels: tuple[Path, ...], proposer: str, llm_model: str | None, llm_base_url: str | None,
             llm_timeout: float, resume_run: int | None, no_profile: bool, db: Path, arch: str | None,
             timeout: float, gpus: str, parallel: int | None, build_jobs: int | None, cluster: str | None,
             output: Path | None) -> None:
    """Search source edits of KERNEL under verification and write the best verified kernel.

    \b
    Every candidate is built with nvcc, verified against the reference on fresh random inputs,
    timed, and profiled with Nsight Compute; everything lands in the trace database.
      optiml optimize kernel.cu --budget 40
      optiml optimize --resume 3 --budget 80      continue run 3 up to 80 candidates in all
      optiml show 3                               why each step on the path helped
    """
    from .cli import _arch, _load, _read_kernel, _require_gpu
    from .spec import load_spec
    from .traces.store import TraceStore

    if budget is not None and budget < 1:
        raise UserError(f"--budget must be at least 1, not {budget}.")
    for flag, value in (("--parallel", parallel), ("--jobs", build_jobs)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, not {value}.")
    store = TraceStore(db, create=resume_run is None)
    if resume_run is None:
        if kernel is None:
            raise UserError("give the KERNEL to optimize, or --resume RUN to continue a stored run.")
        budget = 200 if budget is None else budget
        source, spec = _load(kernel, spec_path)
        seeds = [_read_kernel(p) for p in seed_kernels]
        config = {"budget": budget, "seed": seed, "proposer": proposer, "profile": not no_profile,
                  "kernel": str(kernel.resolve()), "spec": str(spec.path.resolve()), "llm_model": llm_model,
                  "llm_base_url": llm_base_url}
    else:
        run = store.run(resume_run)
        config = dict(run["config"] or {})
        if seed_kernels:
            raise UserError("--seed-kernel joins a new run; a resumed run keeps its own seed kernels.")
        kernel = kernel or Path(config.get("kernel") or "")
        spec_file = spec_path or Path(config.get("spec") or "")
        if not spec_file.is_file():
            raise UserError(f"run {resume_run}'s spec {spec_file} is gone; pass --spec with the same spec.")
        if spec_file.read_text() != run["spec_toml"]:
            raise UserError(f"{spec_file} changed since run {resume_run} started; its results would not compare "
                            f"(start a new run).")
        source = run["kernel_source"]
        spec = load_spec(spec_file, kernel, kernel_source=source)
        seeds = []
        seed, proposer = int(config.get("seed") or run["seed"] or 0), config.get("proposer", "rules")
        no_profile = no_profile or not config.get("profile", True)
        llm_model = llm_model or config.get("llm_model")
        llm_base_url = llm_base_url or config.get("llm_base_url")
        budget = budget if budget is not None else int(run["budget"] or config.get("budget") or 200)
    prop = make_proposer(proposer, llm_model, llm_base_url, llm_timeout)
    _require_gpu("optimize")
    devices = parse_gpus(gpus, visible_gpus())
    parallel = parallel or 16 * len(devices)

    pipeline = _pipeline(spec, source, kernel, _arch(arch), timeout, no_profile, cluster)
    if resume_run is None:
        device, driver = _gpu_facts()
        from .build import nvcc_version

        run_id = store.start_run(spec.entry, spec_toml=spec.path.read_text(), kernel_source=source, config=config,
                                 seed=seed, budget=budget, device=device, nvcc_version=nvcc_version(),
                                 driver_version=driver)
    else:
        run_id = resume_run
        store.set_run_budget(run_id, budget)
        store.set_run_status(run_id, "running")
    from .pool import EvaluationPool

    with EvaluationPool(pipeline, devices, build_workers=build_jobs, timeout_s=timeout) as pool:
        search, best = _search(store, run_id, pool, prop, spec, source, seeds, budget, time_limit, seed,
                               resume_run is not None, kernel, parallel)
    _finish(store, run_id, pipeline, search, best, kernel, output, db)


def _pipeline(spec, source, kernel: Path, arch: str, timeout, no_profile, cluster: str | None = None):
    from .build import NvccBuilder
    from .pipeline import Evaluator
    from .profiler.ncu import NcuProfiler
    from .verify.harness import SubprocessHarness

    if cluster:
        from .cluster import DaskBuilder

        builder = DaskBuilder.connect(cluster, arch)
    else:
        builder = NvccBuilder(arch)
    return Evaluator(spec, source, builder, SubprocessHarness(timeout_s=timeout),
                     include_dir=kernel.resolve().parent, kernel_name=kernel.name,
                     profiler=None if no_profile else NcuProfiler())


def _search(store, run_id, pool, prop, spec, source, seeds, budget, time_limit, seed, resumed, kernel, parallel):
    from .search.mcts import MCTS, SearchConfig
    from .search.run import PipelineEvaluator, StoreObserver, resume_search

    cfg = SearchConfig(budget=budget, time_limit_s=time_limit, seed=seed, parallel=parallel)
    state = {"root": None, "best": None}
    adapter = PipelineEvaluator(pool)
    if resumed:
        search = resume_search(store, run_id, adapter, prop, config=cfg, task=spec.summary(), entry=spec.entry)
        if store.nodes(run_id, "running"):
            raise UserError(f"run {run_id} is being searched by another live optiml process; wait for it or stop it.")
        done = search.evaluations
        root_ms = search.root.median_ms
        ok = [n.median_ms for n in search.nodes if n.status == "ok" and n.median_ms]
        state.update(root=root_ms, best=min(ok) if ok else None)
    else:
        search = MCTS(source, adapter, prop, seed_sources=seeds, config=cfg,
                      observer=StoreObserver(store, run_id, adapter), task=spec.summary(), entry=spec.entry)
        done = 0
    todo = max(0, budget - done) + (0 if resumed else 1)

    def label() -> str:
        best = f" (best {state['root'] / state['best']:.2f}x)" if state["root"] and state["best"] else ""
        return "optimizing" + best

    with click.progressbar(length=todo, label=label(), show_pos=True, file=sys.stderr) as bar:
        def on_done(ev, result):
            if ev.ok and ev.median_ms:
                state["root"] = state["root"] or ev.median_ms
                state["best"] = min(state["best"] or ev.median_ms, ev.median_ms)
            bar.label = label()
            bar.update(1)

        adapter.on_done = on_done
        try:
            best = search.run()
        except KeyboardInterrupt:
            store.set_run_status(run_id, "interrupted")
            raise
    return search, best


def _finish(store, run_id, pipeline, search, best, kernel, output, db):
    root = search.root
    if root.status != "ok":
        store.set_run_status(run_id, "failed")
        raise UserError(f"{kernel}: the kernel itself does not verify ({root.status}: "
                        f"{root.result.get('message', '')}); fix it first.")
    final = _final_timing(pipeline, search, best)
    store.set_run_result(run_id, final)
    store.set_run_status(run_id, "done")
    out = output or kernel.with_suffix(".optiml.cu")
    out.write_text(best.source)
    if final["status"] == "ok":
        figure = (f"{final['speedup']:.2f}x ({final['seed_ms']:.4f} -> {final['best_ms']:.4f} ms, "
                  f"re-verified and timed interleaved with the seed)")
    else:
        figure = (f"{root.median_ms / best.median_ms:.2f}x during the search; the final interleaved re-timing "
                  f"failed ({final['status']}: {final['message']})")
    click.echo(f"run {run_id}: {search.evaluations} candidates; best {figure}; "
               f"path: {'; '.join(best.path()) or 'the seed itself'}; written to {out}")
    click.echo(f"see why: optiml show {run_id} --db {db}")


def _final_timing(pipeline, search, best) -> dict:
    """The best kernel verified again on fresh inputs, then timed interleaved with the seed."""
    from .pipeline import Candidate

    root = search.root
    base = {"search_seed_ms": root.median_ms, "search_best_ms": best.median_ms, "best_edits": list(best.path())}
    if best is root:
        return base | {"status": "ok", "message": "the seed is the best", "seed_ms": root.median_ms,
                       "best_ms": root.median_ms, "speedup": 1.0}
    ev = pipeline.evaluate(Candidate(best.source, tuple(best.flags), name="best.cu"), profile=False,
                           baseline=Candidate(root.source, tuple(root.flags), name="seed.cu"))
    if not ev.ok or not ev.median_ms or not ev.baseline_ms:
        return base | {"status": ev.status, "message": ev.message}
    return base | {"status": "ok", "message": "", "seed_ms": ev.baseline_ms, "best_ms": ev.median_ms,
                   "speedup": ev.baseline_ms / ev.median_ms, "seed": ev.seed}
