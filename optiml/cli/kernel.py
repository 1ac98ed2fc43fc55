"""``optiml init | build | eval | profile``: one kernel, no search."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import UserError
from ..status import Category, Status, category
from .options import EXIT_CANDIDATE_FAILED, arch_option, json_option, spec_option, timeout_option


# --------------------------------------------------------------------------------- init

@click.command()
@click.argument("kernel", type=click.Path(path_type=Path))
@click.option("--entry", help="Which __global__ function, when the file has several.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to write (default: kernel.toml beside the kernel).")
@click.option("--force", is_flag=True, help="Overwrite an existing spec.")
@click.option("--kernelbench", "task", type=click.Path(path_type=Path),
              help="A KernelBench-format task (Model, get_inputs, get_init_inputs): the spec's arrays, sizes and "
                   "reference (its forward, written beside the spec) come from it. Needs torch.")
@click.option("--no-test", "no_test", is_flag=True,
              help="With --kernelbench: keep the draft as read from the kernel, without running its scalars and "
                   "launch (and their alternatives) on the CPU emulation against the task (which needs g++).")
def init(kernel: Path, entry: str | None, output: Path | None, force: bool, task: Path | None, no_test: bool) -> None:
    """Write a draft task spec for KERNEL from its signature; TODO marks what to check."""
    from ..draft import draft_kernelbench, draft_spec
    from ..spec import read_kernel

    out = output or kernel.with_suffix(".toml")
    reference = None
    if task is not None:
        if not no_test:
            click.echo("testing the draft's scalars and launch on the CPU emulation against the task ...", err=True)
        text, ref_text = draft_kernelbench(task, read_kernel(kernel), kernel, entry, out, test=not no_test)
        reference = (out.parent / (kernel.stem + "_ref.py"), ref_text)
        if reference[0].exists() and not force:
            raise UserError(f"{reference[0]}: already exists; pass --force to overwrite it.")
    else:
        text = draft_spec(read_kernel(kernel), kernel, entry)
    if out.is_dir():
        raise UserError(f"{out}: is a folder; give -o the spec file's name, e.g. -o {out / kernel.with_suffix('.toml').name}.")
    if out.exists() and not force:
        raise UserError(f"{out}: already exists; pass --force to overwrite it.")
    try:
        out.write_text(text)
        if reference is not None:
            reference[0].write_text(reference[1])
    except OSError as e:        # no such folder, no permission, a read-only file system
        raise UserError(f"{out}: cannot write the spec ({e.strerror or e}); choose another place with -o.") from None
    todos = sum("TODO" in line for line in text.splitlines())
    beside = Path(out).resolve() == Path(kernel).with_suffix(".toml").resolve()
    spec_flag = "" if beside else f" --spec {out}"
    tested = ("; its launch and scalars verified on the CPU emulation" if "on the CPU emulation at the verify sizes" in text
              else "; the CPU emulation found no launch and scalars that verify: see the TODO lines"
              if "on the CPU emulation the draft fails" in text else "")
    click.echo(f"wrote {out} ({todos} TODO line(s) to check{tested}), then run: optiml eval {kernel}{spec_flag}")


# --------------------------------------------------------------------------------- build

@click.command()
@click.argument("kernel", type=click.Path(path_type=Path))
@spec_option
@arch_option
@timeout_option(120.0, "nvcc is stopped")
@json_option
def build(kernel: Path, spec_path: Path | None, arch: str | None, timeout: float, as_json: bool) -> None:
    """Compile KERNEL to a cubin and report ptxas resource usage (no GPU needed with --arch)."""
    from ..build import NvccBuilder, resolve_arch
    from ..spec import load_task

    source, spec = load_task(kernel, spec_path)
    builder = NvccBuilder(resolve_arch(arch), timeout_s=timeout)
    result = builder.build(source, spec.nvcc_flags, include_dir=kernel.resolve().parent, name=kernel.name)
    if result.ok:
        _check_entry_built(result, spec, source, kernel)
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


def _check_entry_built(result, spec, source: str, kernel: Path) -> None:
    """A UserError unless the cubin holds exactly one function for the spec's entry."""
    from ..build import entry_problem
    from ..source import parse_source

    problem = entry_problem(result, spec.entry, parse_source(source).kernel(spec.entry))
    if problem:
        raise UserError(f"{kernel}: {problem}")


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

@click.command("eval")
@click.argument("kernel", type=click.Path(path_type=Path))
@spec_option
@click.option("--reference-kernel", type=click.Path(path_type=Path),
              help="When the spec's reference is the seed: the seed kernel, if KERNEL is a variant of it.")
@arch_option
@click.option("--device", default=0, show_default=True, help="CUDA device ordinal.")
@click.option("--seed", type=int, help="Seed for the input draws (default: fresh, and printed).")
@timeout_option(120.0, "the GPU child is killed")
@click.option("--no-time", is_flag=True, help="Verify only.")
@click.option("--sanitize", is_flag=True,
              help="Also run it under compute-sanitizer (memcheck, racecheck, initcheck, synccheck) at a small size.")
@json_option
def eval_(kernel: Path, spec_path: Path | None, reference_kernel: Path | None, arch: str | None, device: int,
          seed: int | None, timeout: float, no_time: bool, sanitize: bool, as_json: bool) -> None:
    """Build KERNEL, verify it against the reference and time it on the GPU."""
    from ..app.evaluate import evaluate_kernel

    ev, spec = evaluate_kernel(kernel, spec_path, reference_kernel=reference_kernel, arch=arch, device=device,
                               seed=seed, timeout_s=timeout, time_it=not no_time, sanitize=sanitize)
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
        worst_l2 = max((o.rel_l2_err for c in hr.checks for o in c.outputs), default=0.0)
        lines.append(f"verify    {verdict} on {n} case(s) (seed {ev.seed}): max abs err {worst_abs:.3g}, max rel err "
                     f"{worst_rel:.3g}, relative RMS error {worst_l2:.3g}")
    if ev.status != "ok":
        lines.append(f"status    {ev.status}: {ev.message}")
        if hr is not None and hr.log_tail.strip() and (category(ev.status) is Category.CRASH or ev.status == Status.HARNESS_ERROR):
            lines.append("child output (tail):")
            lines.extend("  " + ln for ln in hr.log_tail.strip().splitlines()[-10:])
        if ev.status == "compile_error" and ev.build is not None:
            lines.append(ev.build.log.rstrip())
    san = ev.sanitize
    if san is not None:
        said = {"clean": f"clean ({', '.join(san.tools)}; {san.wall_s:.1f} s)", "unsafe": f"UNSAFE: {san.message}",
                "not_sanitized": f"not sanitized: {san.message}"}
        lines.append(f"sanitize  {said.get(san.status, san.status)}")
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

@click.command()
@click.argument("kernel", type=click.Path(path_type=Path), required=False)
@spec_option
@click.option("--import", "import_path", type=click.Path(path_type=Path),
              help="Read an existing ncu export (raw or details CSV, or .ncu-rep) instead of profiling.")
@arch_option
@click.option("--clock-control", type=click.Choice(["base", "none"]), default="base", show_default=True,
              help="ncu --clock-control: lock clocks to base, or leave them as they are.")
@timeout_option(180.0, "ncu is stopped")
@json_option
def profile(kernel: Path | None, spec_path: Path | None, import_path: Path | None, arch: str | None,
            clock_control: str, timeout: float, as_json: bool) -> None:
    """Profile KERNEL with Nsight Compute (after verifying it), or read one with --import."""
    from ..profiler.diagnosis import diagnose

    if import_path is not None:
        from ..profiler.model import extract_metrics
        from ..profiler.ncu import import_report

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

    from ..build import NvccBuilder, resolve_arch
    from ..gpus import require_gpu
    from ..profiler.ncu import NcuProfiler
    from ..runner import Candidate, Runner
    from ..spec import load_task
    from ..verify.harness import SubprocessHarness

    source, spec = load_task(kernel, spec_path)
    require_gpu("profile")
    profiler = NcuProfiler(timeout_s=timeout, clock_control=clock_control)
    evaluator = Runner.sequential(spec, source, NvccBuilder(resolve_arch(arch)), SubprocessHarness(), include_dir=kernel.resolve().parent,
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
    from ..profiler.metrics import catalogue_by_key

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
