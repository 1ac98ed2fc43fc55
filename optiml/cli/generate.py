"""``optiml generate``: flags in, :func:`optiml.app.generate.run_generate`, the generation's lines, a
progress bar for the search and the final lines out."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..app.generate import GenerateOptions, run_generate
from .options import SearchProgress, arch_option, db_option, timeout_option

PROPOSERS = ("rules", "llm", "mixed")


@click.command()
@click.argument("spec", type=click.Path(path_type=Path), required=False)
@click.option("--describe", metavar="TEXT",
              help="What the kernel computes, in a sentence, e.g. \"row-wise softmax of an R x C float32 matrix\".")
@click.option("--strategies", type=int, default=4, show_default=True,
              help="Distinct implementation strategies to ask for, one kernel each.")
@click.option("--then-optimize", is_flag=True, help="Go on searching source edits from the verified kernels.")
@click.option("--budget", type=int,
              help="With --then-optimize: candidates to evaluate in all, the strategies' kernels included "
                   "(default 200; with --resume, the run's own).")
@click.option("--proposer", type=click.Choice(PROPOSERS), default="llm", show_default=True,
              help="Where the search's edits come from (with --then-optimize).")
@click.option("--seed", default=0, show_default=True, help="Seed for the requests and the search.")
@click.option("--llm-model", envvar="OPTIML_LLM_MODEL", help="LLM model name (also $OPTIML_LLM_MODEL).")
@click.option("--llm-base-url", envvar="OPTIML_LLM_BASE_URL",
              help="OpenAI-compatible server, e.g. http://localhost:11434/v1 (also $OPTIML_LLM_BASE_URL); "
                   "the key comes from $OPTIML_LLM_API_KEY or $OPENAI_API_KEY.")
@click.option("--llm-timeout", default=120.0, show_default=True, help="Seconds before an LLM request is abandoned.")
@click.option("--resume", "resume_run", type=int, metavar="RUN", help="Continue run RUN of the database.")
@click.option("--no-profile", is_flag=True, help="Do not run Nsight Compute (runtime alone).")
@db_option
@arch_option
@timeout_option(120.0, "a GPU child is killed")
@click.option("--gpus", default="all", show_default=True, help="GPUs to evaluate on, e.g. 0,1.")
@click.option("--parallel", type=int, help="Candidates in flight at once in the search (default 16 per GPU).")
@click.option("--jobs", "build_jobs", type=int, help="nvcc builds at once (default: CPU cores - 1).")
@click.option("--cluster", metavar="ADDRESS", envvar="OPTIML_CLUSTER",
              help="Dask scheduler (tcp://host:8786) whose workers build the candidates (needs the dask extra).")
@click.option("--sanitize", type=click.Choice(["best", "all", "off"]),
              help="Run compute-sanitizer on each new best candidate (the default), on every verified one, or not "
                   "at all; an unsafe kernel is never the best.")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Where to write the best kernel (default: SPEC.generated.cu beside the spec).")
def generate(spec: Path | None, describe: str | None, strategies: int, then_optimize: bool, budget: int | None,
             proposer: str, seed: int, llm_model: str | None, llm_base_url: str | None, llm_timeout: float,
             resume_run: int | None, no_profile: bool, db_path: Path, arch: str | None, timeout: float, gpus: str,
             parallel: int | None, build_jobs: int | None, cluster: str | None, sanitize: str | None,
             output: Path | None) -> None:
    """Write a first kernel for SPEC (a task spec with no kernel: arguments, sizes, a Python
    reference) from a description, by asking an LLM for several strategies and one kernel each.

    \b
    Each kernel is built, verified against the reference and timed; a failed one is shown to the
    model once for one repair. The kernels are children of a root standing for the description in
    the trace database; the best verified one is written, timed against the slowest verified one.
      optiml generate softmax.toml --describe "row-wise softmax of an R x C float32 matrix"
      optiml generate softmax.toml --describe "..." --then-optimize --budget 40
      optiml show RUN                             the strategies and the path to the best
    """
    opts = GenerateOptions(spec=spec, describe=describe, strategies=strategies, then_optimize=then_optimize,
                           budget=budget, resume=resume_run, seed=seed, proposer=proposer, llm_model=llm_model,
                           llm_base_url=llm_base_url, llm_timeout_s=llm_timeout, profile=not no_profile, db=db_path,
                           arch=arch, timeout_s=timeout, gpus=gpus, parallel=parallel, build_jobs=build_jobs,
                           cluster=cluster, output=output, sanitize=sanitize)
    progress = SearchProgress(over="the slowest strategy")

    def on_event(e) -> None:
        if not progress.quiet:
            click.echo(e.text, err=True)

    from ..app.optimize import Interrupted

    try:
        result = run_generate(opts, on_event, progress.on_progress, progress.on_search_end, progress.on_candidate)
    except Interrupted as e:
        progress.on_search_end()
        click.echo(f"interrupted: run {e.run_id} is kept in {db_path}; continue it with "
                   f"optiml generate --resume {e.run_id} --db {db_path}", err=True)
        sys.exit(130)
    finally:
        progress.on_search_end()
    for o in result.strategies:
        click.echo(o.line())
    click.echo(result.line())
    from .optimize import sanitize_line

    click.echo(sanitize_line(result.final, result.sanitize))
    click.echo(f"see why: optiml show {result.run_id} --db {db_path}")
