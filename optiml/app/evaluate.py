"""One kernel, no search: ``evaluate_kernel`` (what ``optiml eval`` prints) and ``build_kernel``,
with no click in them, for the CLI and the Python API (``optiml.evaluate``) alike."""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError


def evaluate_kernel(kernel: Path, spec_path: Path | None = None, *, reference_kernel: Path | None = None,
                    arch: str | None = None, device: int = 0, seed: int | None = None, timeout_s: float = 120.0,
                    time_it: bool = True, sanitize: bool = False):
    """Build ``kernel``, verify it against the reference and time it on the GPU (``time_it=False``:
    verify only; ``sanitize``: also under compute-sanitizer). Returns (Evaluation, TaskSpec); a
    failing kernel is a status on the Evaluation, what a user can fix a UserError."""
    from ..build import NvccBuilder, resolve_arch
    from ..gpus import require_gpu
    from ..runner import Candidate, Runner
    from ..spec import load_task, read_kernel
    from ..verify import harness

    source, spec = load_task(kernel, spec_path)
    seed_source = read_kernel(reference_kernel) if reference_kernel else source
    require_gpu("eval")
    builder = NvccBuilder(resolve_arch(arch))
    sanitizer = None
    if sanitize:
        from ..verify import sanitizer as sanitizers

        sanitizer = sanitizers.Sanitizer()
    evaluator = Runner.sequential(spec, seed_source, builder, harness.SubprocessHarness(timeout_s=timeout_s),
                                  include_dir=kernel.resolve().parent, seed=seed, device=device,
                                  kernel_name=(reference_kernel or kernel).name, sanitizer=sanitizer)
    with evaluator:
        ev = evaluator.evaluate(Candidate(source, name=kernel.name), time_it=time_it, sanitize=sanitize)
    return ev, spec


def build_kernel(kernel: Path, spec_path: Path | None = None, *, arch: str | None = None, timeout_s: float = 120.0):
    """Compile ``kernel`` with its spec's flags (no GPU needed with ``arch``). Returns (BuildResult,
    TaskSpec); a compile error is the result's status, an entry the cubin lacks a UserError."""
    from ..build import NvccBuilder, entry_problem, resolve_arch
    from ..source import parse_source
    from ..spec import load_task

    source, spec = load_task(kernel, spec_path)
    result = NvccBuilder(resolve_arch(arch), timeout_s=timeout_s).build(
        source, spec.nvcc_flags, include_dir=kernel.resolve().parent, name=kernel.name)
    if result.ok:
        problem = entry_problem(result, spec.entry, parse_source(source).kernel(spec.entry))
        if problem:
            raise UserError(f"{kernel}: {problem}")
    return result, spec
