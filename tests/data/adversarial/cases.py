"""The adversarial cases: kernels that try to fool or break the evaluation pipeline, each with
the status the pipeline must give it. One table for tests/test_adversarial_cpu.py,
tests/gpu/test_gpu_adversarial.py and bench/adversarial/run_cases.py.

Importable as ``tests.data.adversarial.cases`` from the repository root (pytest puts it on
sys.path; the bench script inserts it).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "kernels"
GOOD = KERNELS / "vadd_ok.cu"          # evaluated after every bad case: the search must go on


@dataclass(frozen=True)
class AdversarialCase:
    name: str
    kernel: Path
    expected: str                      # the pipeline status (optiml.status.EVALUATION_STATUSES)
    gpu: bool                          # needs a GPU to reach its verdict
    what: str
    check: str | None = None           # for wrong_output: the failed check (verify.compare.CHECK_ORDER)
    build_timeout_s: float = 120.0
    harness_timeout_s: float = 120.0
    time_it: bool = False
    known_gap: str | None = None       # why the pipeline does not give the expected status yet
    control: bool = False              # a correct kernel: shows that the spec and reference of its
                                       # bad neighbours are right, so they fail for their flaw alone
    sanitize: bool = False             # also run under compute-sanitizer (memory safety, races)
    proposal_on: Path | None = None    # a model's proposal on top of this seed (the include rule applies)


CASES: tuple[AdversarialCase, ...] = (
    # ---- kernels of tests/data/kernels (tests/gpu/test_gpu_eval.py checks their details)
    AdversarialCase("vadd_ok", KERNELS / "vadd_ok.cu", "ok", True, "correct", control=True),
    AdversarialCase("vadd_compile_error", KERNELS / "vadd_compile_error.cu", "compile_error", False,
                    "a type error: nvcc rejects it"),
    AdversarialCase("vadd_hang", KERNELS / "vadd_hang.cu", "timeout", True, "an endless loop on the GPU",
                    harness_timeout_s=15.0),
    AdversarialCase("vadd_modifies_input", KERNELS / "vadd_modifies_input.cu", "wrong_output", True,
                    "right output, overwrites an input", check="input_modified"),
    AdversarialCase("vadd_nan", KERNELS / "vadd_nan.cu", "wrong_output", True, "a NaN at one index", check="nan"),
    AdversarialCase("vadd_off_by_one", KERNELS / "vadd_off_by_one.cu", "wrong_output", True,
                    "misses the last element", check="unwritten"),
    AdversarialCase("vadd_oob", KERNELS / "vadd_oob.cu", "runtime_error", True, "stores 256 GiB out of bounds"),
    AdversarialCase("vadd_trap", KERNELS / "vadd_trap.cu", "runtime_error", True, "__trap() in thread 0"),
    AdversarialCase("vadd_unwritten", KERNELS / "vadd_unwritten.cu", "wrong_output", True,
                    "writes the even indices only", check="unwritten"),
    AdversarialCase("vadd_wrong_tail", KERNELS / "vadd_wrong_tail.cu", "wrong_output", True,
                    "wrong in the last partial block", check="tolerance"),
    # ---- tests/data/adversarial
    AdversarialCase("vadd_memorized", HERE / "vadd_memorized.cu", "wrong_output", True,
                    "right only on one input (memorized for seed 1234)", check="tolerance"),
    AdversarialCase("vadd_cached", HERE / "vadd_cached.cu", "wrong_output", True,
                    "replays the first launch's result from a __device__ buffer", check="tolerance"),
    AdversarialCase("reduce_ok", HERE / "reduce_ok.cu", "ok", True, "correct block reduction", control=True),
    AdversarialCase("reduce_race", HERE / "reduce_race.cu", "wrong_output", True,
                    "block reduction without __syncthreads (shared-memory race)"),
    AdversarialCase("vadd_registers", HERE / "vadd_registers.cu", "launch_config_error", False,
                    "207 registers x 1024 threads per block (refused from ptxas's count, before the GPU)"),
    AdversarialCase("vadd_smem_huge", HERE / "vadd_smem_huge.cu", "launch_error", True,
                    "1 MiB of dynamic shared memory per block"),
    AdversarialCase("template_runaway", HERE / "template_runaway.cu", "build_timeout", False,
                    "a compile that does not end (template recursion)", build_timeout_s=3.0),
    AdversarialCase("vadd_printf_flood", HERE / "vadd_printf_flood.cu", "ok", True,
                    "correct, prints megabytes (the parent keeps a tail)"),
    AdversarialCase("vadd_fast_after_verify", HERE / "vadd_fast_after_verify.cu", "wrong_output", True,
                    "correct for its first 16 launches, idle while timed", time_it=True),
    # ---- small outputs: at the timing size every softmax value (near 1/dim) is under the default atol, so
    # the elementwise check alone passes any small answer; the relative check (verify/compare.py) must not
    AdversarialCase("softmax_ok", HERE / "softmax_ok.cu", "ok", True, "correct row softmax", control=True),
    AdversarialCase("softmax_zeros_long", HERE / "softmax_zeros_long.cu", "wrong_output", True,
                    "zeros for rows longer than 100000 (all under atol there)", check="relative"),
    AdversarialCase("softmax_constant_long", HERE / "softmax_constant_long.cu", "wrong_output", True,
                    "the constant 1/dim for rows longer than 100000", check="relative"),
    AdversarialCase("softmax_scaled", HERE / "softmax_scaled.cu", "wrong_output", True,
                    "the softmax times 1.01 at every size (within atol + rtol |ref| everywhere)", check="relative"),
    AdversarialCase("softmax_prefix_sum", HERE / "softmax_prefix_sum.cu", "wrong_output", True,
                    "sums only the first 7/8 of rows longer than 100000", check="relative"),
    AdversarialCase("softmax_half_read", HERE / "softmax_half_read.cu", "wrong_output", True,
                    "reads only the first half of rows longer than 100000", check="relative"),
    AdversarialCase("softmax_half_accum", HERE / "softmax_half_accum.cu", "wrong_output", True,
                    "a float32 task whose sums accumulate in float16", check="relative"),
    AdversarialCase("softmax_verify_sizes_only", HERE / "softmax_verify_sizes_only.cu", "wrong_output", True,
                    "right at the verification sizes only (unnormalised at the timing size)", check="tolerance"),
    # ---- faster than physics: verified twice, yet past the speed of light (here because [counts] overstate it)
    AdversarialCase("vadd_overcounted", HERE / "vadd_overcounted.cu", "beyond_bound", True,
                    "correct, but its [counts] claim 4x the bytes it moves: timed at ~350 % of the speed of light",
                    time_it=True),
    # ---- safe as well as right (compute-sanitizer), and candidate hygiene
    AdversarialCase("vadd_ok_sanitized", KERNELS / "vadd_ok.cu", "ok", True, "correct, and clean under every tool",
                    control=True, sanitize=True),
    AdversarialCase("vadd_slack_write", HERE / "vadd_slack_write.cu", "unsafe", True,
                    "right outputs, writes one past the end (into the allocation's slack)", sanitize=True),
    AdversarialCase("vadd_uninit_read", HERE / "vadd_uninit_read.cu", "unsafe", True,
                    "right outputs, reads memory never written", sanitize=True),
    AdversarialCase("vadd_shared_race", HERE / "vadd_shared_race.cu", "unsafe", True,
                    "right outputs, a shared-memory race", sanitize=True),
    AdversarialCase("vadd_include_host", HERE / "vadd_include_host.cu", "edit_failed", False,
                    "a proposal including a host file (nvcc would echo it into the log)", proposal_on=GOOD),
)


def case(name: str) -> AdversarialCase:
    return next(c for c in CASES if c.name == name)


def load(kernel: Path):
    """(source, spec) the way the CLI and tests/gpu/test_gpu_eval.py load a kernel."""
    from optiml.spec import find_spec, load_spec

    source = kernel.read_text()
    return source, load_spec(find_spec(kernel), kernel, kernel_source=source)


def evaluate(kernel: Path, builder, harness, *, time_it: bool = False, sanitizer=None, proposal_on: Path | None = None):
    """Evaluate a kernel as its own seed through optiml.runner.Runner.sequential (as test_gpu_eval.py's
    ``evaluate``): the builder, harness and sanitizer are the caller's, so they can be real or fakes.
    With ``proposal_on``, the kernel is a model's proposal on that seed: the include rule a search
    applies to proposals comes first (a refused one is an ``edit_failed`` Evaluation, never built)."""
    from optiml.runner import Candidate, Evaluation, Runner

    source, spec = load(kernel)
    if proposal_on is not None:
        from optiml.edits.hygiene import include_violation

        why = include_violation(proposal_on.read_text(), source, [kernel.parent])
        if why:
            return Evaluation("edit_failed", why)
    with Runner.sequential(spec, source, builder, harness, include_dir=kernel.parent, kernel_name=kernel.name,
                           sanitizer=sanitizer) as ev:
        return ev.evaluate(Candidate(source, name=kernel.name), time_it=time_it, sanitize=sanitizer is not None)


def sanitizer_for(c: AdversarialCase):
    """The real compute-sanitizer for a case that asks for it, else None."""
    if not c.sanitize:
        return None
    from optiml.verify.sanitizer import Sanitizer

    return Sanitizer()


def builder_for(c: AdversarialCase, arch: str, cache_dir: Path):
    from optiml.build import NvccBuilder

    return NvccBuilder(arch, cache_dir=cache_dir, timeout_s=c.build_timeout_s)


def harness_for(c: AdversarialCase):
    from optiml.verify.harness import SubprocessHarness

    return SubprocessHarness(timeout_s=c.harness_timeout_s)
