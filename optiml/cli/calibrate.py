"""``optiml calibrate``: measure this GPU's speed of light (DRAM copy and L2 bandwidth, FP32 FMA and
tensor-core rates) once per GPU model, driver and clocks setting, for every speed-of-light figure."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import click


@click.command()
@click.option("--show", is_flag=True, help="Print the cached calibrations of every GPU and measure nothing.")
@click.option("--import", "import_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Load figures measured elsewhere (a calibration cache file, or what --json printed).")
@click.option("--force", is_flag=True, help="Measure again even when this GPU, driver and clocks setting have figures.")
@click.option("--arch", help="The architecture to build the microbenchmarks for (default: the GPU's own).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON (what --import reads).")
def calibrate(show: bool, import_path: Path | None, force: bool, arch: str | None, as_json: bool) -> None:
    """Measure the GPU's peaks (cached; speed-of-light figures use them and say "measured").

    \b
    Without a calibration, speed-of-light figures use the datasheet's peaks and say "datasheet".
    The figures are kept in calibration.json under the optiml cache folder ($OPTIML_CACHE_DIR).
    """
    from ..profiler.calibration import cache_file, format_calibration, import_file, read_cache

    if import_path is not None:
        cals = import_file(import_path)
        click.echo(f"imported {len(cals)} calibration{'s' if len(cals) != 1 else ''} into {cache_file()}:")
        for cal in cals:
            click.echo(format_calibration(cal), nl=False)
        return
    if show:
        cals = list(read_cache().values())
        if as_json:
            click.echo(json.dumps({"calibrations": [c.to_dict() for c in cals]}, indent=1))
        elif not cals:
            click.echo(f"no calibration in {cache_file()}; speed-of-light figures use datasheet peaks "
                       f"(run optiml calibrate on the GPU)")
        else:
            for cal in cals:
                click.echo(format_calibration(cal), nl=False)
        return
    _require_gpu()
    from ..app.calibration import calibration
    from ..build import resolve_arch

    cal, measured = calibration(resolve_arch(arch), force=force)
    said = (f"measured, saved in {cache_file()}" if measured
            else "cached (optiml calibrate --force measures again)")
    if as_json:
        click.echo(json.dumps(cal.to_dict(), indent=1))
    else:
        click.echo(f"{said}:")
        click.echo(format_calibration(cal), nl=False)


def _require_gpu() -> None:
    """No GPU: one sentence (what works without one), as the other GPU commands say it."""
    from ..errors import EnvironmentProblem
    from ..gpus import require_gpu, visible_gpus

    if shutil.which("nvidia-smi") is None or not visible_gpus():
        why = "nvidia-smi is not on PATH" if shutil.which("nvidia-smi") is None else "nvidia-smi lists no GPU"
        raise EnvironmentProblem(f"no GPU was found ({why}); `optiml calibrate` measures a CUDA GPU, while "
                                 f"--show lists cached figures and --import FILE loads figures measured elsewhere.")
    require_gpu("calibrate")
