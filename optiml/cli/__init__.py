"""The ``optiml`` command: a thin click layer over functions a notebook can call. The only place
that wires concrete classes together and prints."""
from __future__ import annotations

import sys

import click
from loguru import logger

from .. import __version__
from ..errors import UserError


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
@click.pass_context
def main(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """optiml: make CUDA kernels faster by searching source edits under verification.

    \b
    Start with a kernel and its task spec (kernel.toml beside kernel.cu):
      optiml init kernel.cu        write a draft spec from the kernel's signature
      optiml build kernel.cu       compile and show registers, shared memory, spills (no GPU needed)
      optiml eval kernel.cu        build, verify against the reference and time it on the GPU
    """
    ctx.obj = {"verbose": verbose, "quiet": quiet}        # -q wins where both are read (SearchProgress)
    logger.remove()
    level = "ERROR" if quiet else {0: "WARNING", 1: "INFO"}.get(verbose, "DEBUG")
    logger.add(sys.stderr, level=level, format="<level>{level: <7}</level> {message}")
    logger.enable("optiml")


from . import calibrate, doctor, generate, kernel, optimize, traces  # noqa: E402  (heavy imports are lazy inside each command)

for _cmd in (kernel.init, kernel.build, kernel.eval_, kernel.profile, *traces.COMMANDS, optimize.optimize, doctor.doctor,
             calibrate.calibrate, generate.generate):
    main.add_command(_cmd)
