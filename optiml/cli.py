"""The ``optiml`` command. The only place that wires concrete classes together and prints."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click
from loguru import logger

from . import __version__
from .errors import UserError

EXIT_CANDIDATE_FAILED = 3


class _Group(click.Group):
    """Turns optiml's UserError into one line on stderr, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as e:
            raise click.ClickException(str(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="optiml")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def main(verbose: int, quiet: bool) -> None:
    """optiml: make CUDA kernels faster by searching source edits under verification.

    \b
    Start with a kernel and its task spec (kernel.toml beside kernel.cu):
      optiml init kernel.cu        write a draft spec from the kernel's signature
      optiml build kernel.cu       compile and show registers, shared memory, spills (no GPU needed)
      optiml eval kernel.cu        build, verify against the reference and time it on the GPU
    """
    logger.remove()
    level = "ERROR" if quiet else {0: "WARNING", 1: "INFO"}.get(verbose, "DEBUG")
    logger.add(sys.stderr, level=level, format="<level>{level: <7}</level> {message}")
    logger.enable("optiml")


def _read_kernel(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path}: kernel file not found.")
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file.") from None


def _load(kernel: Path, spec_path: Path | None):
    from .spec import find_spec, load_spec

    source = _read_kernel(kernel)
    spec = load_spec(find_spec(kernel, spec_path), kernel, kernel_source=source)
    return source, spec


def _arch(arch: str | None) -> str:
    from .build import detect_arch, normalize_arch

    return normalize_arch(arch) if arch else detect_arch()


def _require_gpu(command: str) -> None:
    import importlib.util

    if shutil.which("nvidia-smi") is None:
        raise UserError(f"no GPU was found (nvidia-smi is not on PATH); `optiml {command}` runs kernels and needs a "
                        f"CUDA GPU (`optiml build` checks compilation without one).")
    if importlib.util.find_spec("pycuda") is None:
        raise UserError("pycuda is not installed; install the gpu extra: pip install 'optiml-kernels[gpu]'.")


# --------------------------------------------------------------------------------- init

@main.command()
@click.argument("kernel", type=click.Path(path_type=Path))
@click.option("--entry", help="Which __global__ function, when the file has several.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to write (default: kernel.toml beside the kernel).")
@click.option("--force", is_flag=True, help="Overwrite an existing spec.")
def init(kernel: Path, entry: str | None, output: Path | None, force: bool) -> None:
    """Write a draft task spec for KERNEL from its signature; TODO marks what to check."""
    from .draft import draft_spec

    text = draft_spec(_read_kernel(kernel), kernel, entry)
    out = output or kernel.with_suffix(".toml")
    if out.exists() and not force:
        raise UserError(f"{out}: already exists; pass --force to overwrite it.")
    out.write_text(text)
    todos = sum("TODO" in line for line in text.splitlines())
    click.echo(f"wrote {out} ({todos} TODO line(s) to check), then run: optiml eval {kernel}")


# --------------------------------------------------------------------------------- build

@main.command()
@click.argument("kernel", type=click.Path(path_type=Path))
@click.option("--spec", "spec_path", type=click.Path(path_type=Path), help="Task spec (default: kernel.toml beside the kernel).")
@click.option("--arch", help="GPU architecture, e.g. sm_90 (default: the GPU's).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds before nvcc is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def build(kernel: Path, spec_path: Path | None, arch: str | None, timeout: float, as_json: bool) -> None:
    """Compile KERNEL to a cubin and report ptxas resource usage (no GPU needed with --arch)."""
    from .build import NvccBuilder

    source, spec = _load(kernel, spec_path)
    builder = NvccBuilder(_arch(arch), timeout_s=timeout)
    result = builder.build(source, spec.nvcc_flags, include_dir=kernel.resolve().parent, name=kernel.name)
    res = result.entry_resources(spec.entry)
    if as_json:
        click.echo(json.dumps({"status": result.status, "arch": result.arch, "entry": spec.entry,
                               "resources": res.__dict__ if res else None, "wall_s": result.wall_s,
                               "cached": result.cached, "log": result.log}, indent=2))
    else:
        click.echo(_build_line(result, res))
        if not result.ok:
            click.echo(result.log.rstrip())
    if not result.ok:
        sys.exit(EXIT_CANDIDATE_FAILED)


def _build_line(result, res) -> str:
    if not result.ok:
        return f"build     {result.status} ({result.arch}, {result.wall_s:.2f} s)"
    cached = ", cached" if result.cached else ""
    if res is None:
        return f"build     ok ({result.arch}{cached})"
    return (f"build     ok ({result.arch}, {result.wall_s:.2f} s{cached}): {res.registers} registers, "
            f"{res.smem_static} B static shared, {res.stack_frame} B stack, "
            f"{res.spill_stores} B spill stores, {res.spill_loads} B spill loads")


# --------------------------------------------------------------------------------- eval

@main.command("eval")
@click.argument("kernel", type=click.Path(path_type=Path))
@click.option("--spec", "spec_path", type=click.Path(path_type=Path), help="Task spec (default: kernel.toml beside the kernel).")
@click.option("--reference-kernel", type=click.Path(path_type=Path),
              help="When the spec's reference is the seed: the seed kernel, if KERNEL is a variant of it.")
@click.option("--arch", help="GPU architecture, e.g. sm_90 (default: the GPU's).")
@click.option("--device", default=0, show_default=True, help="CUDA device ordinal.")
@click.option("--seed", type=int, help="Seed for the input draws (default: fresh, and printed).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds before the GPU child is killed.")
@click.option("--no-time", is_flag=True, help="Verify only.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def eval_(kernel: Path, spec_path: Path | None, reference_kernel: Path | None, arch: str | None, device: int,
          seed: int | None, timeout: float, no_time: bool, as_json: bool) -> None:
    """Build KERNEL, verify it against the reference and time it on the GPU."""
    from .build import NvccBuilder
    from .runner import Candidate, Runner
    from .verify.harness import SubprocessHarness

    source, spec = _load(kernel, spec_path)
    seed_source = _read_kernel(reference_kernel) if reference_kernel else source
    _require_gpu("eval")
    builder = NvccBuilder(_arch(arch))
    evaluator = Runner.sequential(spec, seed_source, builder, SubprocessHarness(timeout_s=timeout),
                          include_dir=kernel.resolve().parent, seed=seed, device=device,
                          kernel_name=(reference_kernel or kernel).name)
    ev = evaluator.evaluate(Candidate(source, name=kernel.name), time_it=not no_time)
    if as_json:
        click.echo(json.dumps(ev.to_dict(), indent=2, default=str))
    else:
        click.echo(format_evaluation(ev, kernel, spec))
    if not ev.ok:
        sys.exit(EXIT_CANDIDATE_FAILED)


def format_evaluation(ev, kernel: Path, spec) -> str:
    lines = []
    device = ev.harness.device_name if ev.harness and ev.harness.device_name else ""
    arch = ev.build.arch if ev.build else ""
    lines.append(f"kernel    {kernel} (entry {spec.entry}{', ' + arch if arch else ''}{', ' + device if device else ''})")
    if ev.build:
        lines.append(_build_line(ev.build, ev.resources))
        if ev.build.warnings:
            lines.extend("          " + w for w in ev.build.warnings[:5])
    if ev.launch:
        sizes = " ".join(f"{k}={v}" for k, v in spec.timing_sizes.items())
        lines.append(f"launch    grid {ev.launch.grid} block {ev.launch.block} shared {ev.launch.shared_mem} B at {sizes}")
    hr = ev.harness
    if hr is not None and hr.checks:
        n = len(hr.checks)
        worst_abs = max(c.max_abs_err for c in hr.checks)
        worst_rel = max(c.max_rel_err for c in hr.checks)
        verdict = "PASSED" if all(c.passed for c in hr.checks) else "FAILED"
        lines.append(f"verify    {verdict} on {n} case(s) (seed {ev.seed}): max abs err {worst_abs:.3g}, max rel err {worst_rel:.3g}")
    if ev.status != "ok":
        lines.append(f"status    {ev.status}: {ev.message}")
        if hr is not None and hr.log_tail.strip() and ev.status in ("runtime_error", "timeout", "harness_error", "launch_error"):
            lines.append("child output (tail):")
            lines.extend("  " + ln for ln in hr.log_tail.strip().splitlines()[-10:])
        if ev.status == "compile_error" and ev.build is not None:
            lines.append(ev.build.log.rstrip())
    t = hr.timing if hr else None
    if t is not None:
        extra = []
        if ev.gflops:
            extra.append(f"{ev.gflops:,.0f} GFLOP/s")
        if ev.gbps:
            extra.append(f"{ev.gbps:,.1f} GB/s")
        lines.append(f"timing    {t.median_ms:.4f} ms median (IQR {100 * t.spread:.1f}%, min {t.min_ms:.4f}, max {t.max_ms:.4f}, "
                     f"{t.reps} reps, {t.input_sets} input set(s), L2 {'flushed' if t.flushed_l2 else 'warm'})"
                     + (": " + ", ".join(extra) if extra else ""))
    return "\n".join(lines)


# --------------------------------------------------------------------------------- profile

@main.command()
@click.argument("kernel", type=click.Path(path_type=Path), required=False)
@click.option("--spec", "spec_path", type=click.Path(path_type=Path), help="Task spec (default: kernel.toml beside the kernel).")
@click.option("--import", "import_path", type=click.Path(path_type=Path),
              help="Read an existing ncu export (raw or details CSV, or .ncu-rep) instead of profiling.")
@click.option("--arch", help="GPU architecture, e.g. sm_90 (default: the GPU's).")
@click.option("--clock-control", type=click.Choice(["base", "none"]), default="base", show_default=True,
              help="ncu --clock-control: lock clocks to base, or leave them as they are.")
@click.option("--timeout", default=180.0, show_default=True, help="Seconds before ncu is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profile(kernel: Path | None, spec_path: Path | None, import_path: Path | None, arch: str | None,
            clock_control: str, timeout: float, as_json: bool) -> None:
    """Profile KERNEL with Nsight Compute (after verifying it), or read one with --import."""
    from .profiler.diagnosis import diagnose

    if import_path is not None:
        from .profiler.model import extract_metrics
        from .profiler.ncu import import_report

        if not import_path.is_file():
            raise UserError(f"{import_path}: file not found.")
        try:
            _, report = import_report(import_path)
        except ValueError as e:
            raise UserError(f"{import_path}: not an ncu CSV export ({e}).") from None
        out = []
        for launch in report.launches:
            metrics = extract_metrics(launch)
            out.append({"kernel": launch.kernel_name, "id": launch.id, "nvtx": list(launch.nvtx_names),
                        "metrics": metrics, "diagnosis": diagnose(metrics)})
        if as_json:
            click.echo(json.dumps(out, indent=2, default=str))
        else:
            for item in out:
                click.echo(f"launch {item['id']}: {item['kernel']}" + (f" [{', '.join(item['nvtx'])}]" if item["nvtx"] else ""))
                click.echo(format_metrics(item["metrics"], item["diagnosis"]))
        return
    if kernel is None:
        raise UserError("give a KERNEL to profile, or --import FILE to read an existing ncu export.")

    from .build import NvccBuilder
    from .runner import Candidate, Runner
    from .profiler.ncu import NcuProfiler
    from .verify.harness import SubprocessHarness

    source, spec = _load(kernel, spec_path)
    _require_gpu("profile")
    profiler = NcuProfiler(timeout_s=timeout, clock_control=clock_control)
    evaluator = Runner.sequential(spec, source, NvccBuilder(_arch(arch)), SubprocessHarness(), include_dir=kernel.resolve().parent,
                          kernel_name=kernel.name, profiler=profiler)
    ev = evaluator.evaluate(Candidate(source, name=kernel.name))
    if as_json:
        data = {"evaluation_status": ev.status, "evaluation_message": ev.message, "median_ms": ev.median_ms}
        data |= ev.to_dict().get("profile") or {"status": None}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(format_evaluation(ev, kernel, spec))
        p = ev.profile
        if p is not None:
            if p.ok:
                click.echo(f"profile   ok in {p.wall_s:.2f} s (ncu, clock control {clock_control})")
                click.echo(format_metrics(p.metrics, p.diagnosis))
            else:
                click.echo(f"profile   {p.status.value}: {p.message}")
    if not ev.ok or ev.profile is None or not ev.profile.ok:
        sys.exit(EXIT_CANDIDATE_FAILED)


def format_metrics(metrics: dict, diagnosis: list[str]) -> str:
    from .profiler.metrics import catalogue_by_key

    table = catalogue_by_key()
    lines = []
    for key, value in metrics.items():
        if value is None:
            continue
        unit = table[key].unit if key in table else ""
        shown = f"{value:,.4g}" if isinstance(value, float) else str(value)
        lines.append(f"  {key:<34} {shown} {unit}".rstrip())
    if diagnosis:
        lines.append("diagnosis:")
        lines.extend(f"  - {s}" for s in diagnosis)
    return "\n".join(lines)


# --------------------------------------------------------------------------------- trajectories

from .traces.cli_commands import best, export, runs, show  # noqa: E402  (click commands; imports are lazy inside)

for _cmd in (runs, show, best, export):
    main.add_command(_cmd)


# --------------------------------------------------------------------------------- optimize

from .optimize import optimize  # noqa: E402  (a click command; heavy imports are lazy inside)

main.add_command(optimize)
