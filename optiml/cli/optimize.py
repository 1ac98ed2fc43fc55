"""``optiml optimize``: flags in, :func:`optiml.app.optimize.run_optimize`, a progress bar and two lines out."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..app.optimize import OptimizeOptions, run_optimize

from .options import SearchProgress, arch_option, db_option, spec_option, timeout_option

PROPOSERS = ("rules", "llm", "mixed")


@click.command()
@click.argument("kernel", type=click.Path(path_type=Path), required=False)
@spec_option
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
@click.option("--no-templates", is_flag=True,
              help="Do not offer operation templates (a GEMM-like or row-wise kernel rewritten as one of optiml's "
                   "tuned templates behind the same signature, verified like any edit).")
@click.option("--tf32", is_flag=True,
              help="Also offer fp32 GEMMs the TF32 tensor-core template (about 1e-3 relative error; kept only where "
                   "the task's tolerance holds).")
@db_option
@arch_option
@timeout_option(120.0, "a GPU child is killed")
@click.option("--gpus", default="all", show_default=True,
              help="GPUs to evaluate on, e.g. 0,1: one persistent worker each; candidates go to whichever is free. "
                   "ncu profiles one GPU of a host at a time (the driver serialises it), so with profiling a second "
                   "GPU adds ~10-25 %; with --no-profile, ~2x.")
@click.option("--parallel", type=int, help="Candidates in flight at once (default 16 per GPU; 1 = one at a time).")
@click.option("--focus", type=click.FloatRange(min=0), default=3.0, show_default=True,
              help="Once a candidate is this many times slower than the fastest, leave such candidates until "
                   "nothing faster is left to try (0 = off).")
@click.option("--jobs", "build_jobs", type=int, help="nvcc builds at once (default: CPU cores - 1).")
@click.option("--cluster", metavar="ADDRESS", envvar="OPTIML_CLUSTER",
              help="Dask scheduler (tcp://host:8786): its workers build the candidates, and its GPU workers (one per "
                   "GPU, started with --resources GPU=1) verify, time and profile each one; --gpus is then unused "
                   "(needs the dask extra; see the README).")
@click.option("--sanitize", type=click.Choice(["best", "all", "off"]),
              help="Run compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on each new best candidate "
                   "(the default), on every verified one, or not at all; an unsafe candidate is never the best. "
                   "With --resume: the run's own unless given.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to write the best kernel (default: KERNEL.optiml.cu).")
def optimize(kernel: Path | None, spec_path: Path | None, budget: int | None, time_limit: float | None, seed: int,
             seed_kernels: tuple[Path, ...], proposer: str, llm_model: str | None, llm_base_url: str | None,
             llm_timeout: float, resume_run: int | None, no_profile: bool, no_templates: bool, tf32: bool, db_path: Path,
             arch: str | None,
             timeout: float, gpus: str, parallel: int | None, focus: float, build_jobs: int | None,
             cluster: str | None, sanitize: str | None, output: Path | None) -> None:
    """Search source edits of KERNEL under verification and write the best verified kernel.

    \b
    Every candidate is built with nvcc, verified against the reference on fresh random inputs,
    timed, and profiled with Nsight Compute; everything lands in the trace database.
      optiml optimize kernel.cu --budget 40
      optiml optimize --resume 3 --budget 80      continue run 3 up to 80 candidates in all
      optiml show 3                               why each step on the path helped
    """

    opts = OptimizeOptions(kernel=kernel, spec=spec_path, budget=budget, time_limit_s=time_limit, seed=seed,
                           seed_kernels=tuple(seed_kernels), proposer=proposer, llm_model=llm_model,
                           llm_base_url=llm_base_url, llm_timeout_s=llm_timeout, resume=resume_run,
                           profile=not no_profile, db=db_path, arch=arch, timeout_s=timeout, gpus=gpus,
                           parallel=parallel, focus=focus, build_jobs=build_jobs, cluster=cluster, output=output,
                           sanitize=sanitize, templates=not no_templates, tf32=tf32)
    progress = SearchProgress()

    from ..app.optimize import Interrupted

    try:
        result = run_optimize(opts, progress.on_progress, progress.on_search_end, progress.on_candidate)
    except Interrupted as e:
        progress.on_search_end()
        click.echo(f"interrupted: run {e.run_id} is kept in {db_path}; continue it with "
                   f"optiml optimize --resume {e.run_id} --db {db_path}", err=True)
        sys.exit(130)
    finally:
        progress.on_search_end()
    click.echo(summary_line(result))
    click.echo(sanitize_line(result.final, result.sanitize))
    click.echo(f"see why: optiml show {result.run_id} --db {db_path}")


def sanitize_line(final: dict, mode: str) -> str:
    """Which compute-sanitizer checks the written kernel passed, in one line (as `optiml show` says it)."""
    from ..traces.report import format_sanitize

    if mode == "off":
        return "sanitize: off (the written kernel was not run under compute-sanitizer)"
    return format_sanitize(final.get("sanitize"))


def summary_line(result) -> str:
    """``run N: ... candidates; best ...x (95 % interval ...) ...; path: ...; written to ...``."""
    return result.line()
