"""The runner's stages one at a time (Runner.one_slot) with a real nvcc and a fake harness (it records the jobs it is given
and answers 'ok' without a GPU): what reaches the GPU, and what is stopped before it."""
from optiml.build import NvccBuilder
from optiml.runner import Candidate, Preparer, Runner
from optiml.verify.harness import HarnessResult
from tests.fakes import FakeHarness
from tests.test_spec import KERNEL, load


class RecordingFakeHarness(FakeHarness):
    def __init__(self):
        self.jobs = []

    def run(self, job):
        self.jobs.append(job)
        return HarnessResult("ok")


def evaluator(spec, seed_source, builder, harness, **kw):
    """One candidate at a time through the runner's standard stages."""
    return Runner.one_slot(Preparer(spec, seed_source, builder, **kw), harness)


def make(tmp_path, **kw):
    spec = load(tmp_path)
    harness = RecordingFakeHarness()
    ev = evaluator(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"), harness, **kw)
    return ev, harness


def test_job_has_fresh_seeds_every_size_and_the_candidates_launch(tmp_path):
    ev, harness = make(tmp_path)
    result = ev.evaluate(Candidate(KERNEL.replace("BLOCK 128", "BLOCK 512")))
    assert result.status == "ok" and result.resources.registers > 0
    job = harness.jobs[0]
    assert [c.size_index for c in job.cases] == [1, 1, 1, 2, 2, 2, 0]
    assert len({c.seed for c in job.cases}) == 7
    assert job.candidate.launches[0].block == (512, 1, 1) and job.candidate.launches[0].grid == (2048, 1, 1)
    assert job.reference.launches[0].block == (128, 1, 1)          # the seed keeps its own launch
    ev.evaluate(Candidate(KERNEL))
    assert harness.jobs[1].cases[0].seed != job.cases[0].seed      # fresh inputs on every evaluation


def test_fixed_seed_is_reproducible(tmp_path):
    ev, harness = make(tmp_path, seed=42)
    ev.evaluate(Candidate(KERNEL))
    ev.evaluate(Candidate(KERNEL))
    assert harness.jobs[0].cases == harness.jobs[1].cases


def test_a_cases_seed_stays_within_31_bits_from_any_base_seed(tmp_path):
    """Each case's seed is base + 1000003 n wrapped to 31 bits (NumPy's and the GPU child's range), all
    distinct, from the largest base seed too."""
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"))
    for base in (0, 2**31 - 1):
        seeds = [c.seed for c in prep.cases(base)]
        assert all(0 <= s < 2**31 for s in seeds) and len(set(seeds)) == len(seeds) == 7, seeds
        assert seeds == [(base + 1_000_003 * n) % 2**31 for n in range(7)]      # the timing case's last


def test_failures_before_the_gpu_are_statuses(tmp_path):
    ev, harness = make(tmp_path)
    r = ev.evaluate(Candidate(KERNEL.replace("BLOCK 128", "BLOCK 2048")))
    assert r.status == "launch_config_error" and "at most 1024" in r.message
    r = ev.evaluate(Candidate(KERNEL.replace("void scale", "void scaled")))
    assert r.status == "source_error" and "found: scaled" in r.message
    r = ev.evaluate(Candidate(KERNEL.replace("alpha * x[i]", "alpha * x[i] + nope")))
    assert r.status == "compile_error" and "nope" in r.message
    r = ev.evaluate(Candidate("// optiml:launch {grid = [\"cdiv(N, WIDTH)\"]}\n" + KERNEL))
    assert r.status == "launch_config_error" and "WIDTH" in r.message
    assert harness.jobs == []                                        # none of these reached the GPU


class LostBuildFake:
    """A builder whose (remote) worker died, as DaskBuilder reports it."""
    arch = "sm_90"

    def build(self, source, flags=(), *, include_dir=None, name="kernel.cu"):
        from optiml.build import BuildResult
        return BuildResult(status="worker_lost", key="k", arch="sm_90",
                           log="error: the cluster lost the build (KilledWorker: ...).")


def test_a_build_lost_with_its_workers_is_build_lost_and_scored_as_a_build_failure(tmp_path):
    from optiml.search.reward import BUILD_FAILURE_REWARD, reward

    spec = load(tmp_path)
    harness = RecordingFakeHarness()
    r = evaluator(spec, KERNEL, LostBuildFake(), harness).evaluate(Candidate(KERNEL))
    assert r.status == "build_lost" and "lost" in r.message and "KilledWorker" in r.message
    assert "nvcc" not in r.message and harness.jobs == []
    assert reward({"status": r.status}, 1.0, None) == BUILD_FAILURE_REWARD


def test_broken_seed_is_a_reference_error_for_candidates(tmp_path):
    spec = load(tmp_path)
    harness = RecordingFakeHarness()
    ev = evaluator(spec, KERNEL.replace("alpha * x[i]", "alpha * x[i] +"), NvccBuilder("sm_90", cache_dir=tmp_path / "c"), harness)
    r = ev.evaluate(Candidate(KERNEL))
    assert r.status == "reference_error" and "does not build" in r.message


class ScriptedFakeHarness(FakeHarness):
    """A fake harness answering from a script of (status, median_ms), on a named H100."""

    def __init__(self, *script):
        self.script, self.jobs = list(script), []

    def run(self, job):
        from optiml.verify.harness import TimingResult

        self.jobs.append(job)
        status, ms = self.script.pop(0)
        timing = TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True) if ms is not None else None
        return HarnessResult(status, "" if status == "ok" else "max abs error 3", timing=timing,
                             device_name="NVIDIA H100 80GB HBM3")


def test_a_time_under_the_speed_of_light_is_verified_again_on_new_inputs(tmp_path):
    # the spec moves 8 * N bytes at N = 1,048,576: 8.4 MB at 3.35 TB/s is at least 2.5 us
    spec = load(tmp_path)
    cheat = ScriptedFakeHarness(("ok", 0.0001), ("wrong_output", None))
    ev = evaluator(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), cheat)
    r = ev.evaluate(Candidate(KERNEL))
    assert len(cheat.jobs) == 2 and cheat.jobs[1].cases != cheat.jobs[0].cases        # new inputs
    assert r.status == "wrong_output" and "under the speed of light" in r.message
    assert r.speed_of_light["bound_ms"] > 0.002 and r.speed_of_light["recheck_status"] == "wrong_output"
    # passes again, within SOL_MARGIN of the bound (2.5 us): counts, flagged
    honest = ScriptedFakeHarness(("ok", 0.0023), ("ok", 0.0023))
    ev = evaluator(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), honest)
    r = ev.evaluate(Candidate(KERNEL))
    assert r.status == "ok" and r.speed_of_light["recheck_status"] == "ok" and len(honest.jobs) == 2
    # passes again, still far past the bound: a finding, never a result
    beyond = ScriptedFakeHarness(("ok", 0.0013), ("ok", 0.0013))
    ev = evaluator(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), beyond)
    r = ev.evaluate(Candidate(KERNEL))
    assert r.status == "beyond_bound" and r.median_ms is None and r.speed_of_light["recheck_status"] == "beyond_bound"
    assert "verified twice, yet timed at 0.0013 ms" in r.message and "[counts]" in r.message
    assert "0.008389 GB at 3350 GB/s" in r.message
    slow = ScriptedFakeHarness(("ok", 0.05))                        # above the bound: no second run
    ev = evaluator(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), slow)
    assert ev.evaluate(Candidate(KERNEL)).speed_of_light is None and len(slow.jobs) == 1


def test_the_second_look_past_the_speed_of_light_uses_the_strict_tolerances(tmp_path):
    """A spec that loosened float32 (atol 1, rel_rms 0.5) is verified again with the defaults."""
    from tests.test_spec import SPEC
    spec = load(tmp_path, SPEC + "\n[tolerance]\nfloat32 = { atol = 1.0, rtol = 1e-5, rel_rms = 0.5 }\n")
    h = ScriptedFakeHarness(("ok", 0.0001), ("ok", 0.0001))
    evaluator(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), h).evaluate(Candidate(KERNEL))
    first, again = (j.spec.tolerance("float32") for j in h.jobs)
    assert (first.atol, first.rtol, first.rel_rms) == (1.0, 1e-5, 0.5)
    assert (again.atol, again.rtol, again.rel_rms) == (1e-4, 1e-5, 1e-3)


def test_a_candidate_whose_constants_break_a_shape_is_a_launch_config_error(tmp_path):
    import re
    from tests.test_spec import SPEC, write

    spec_text = re.sub(r'shape = \["N"\]', 'shape = ["N * PAD"]', SPEC, count=1)
    assert spec_text != SPEC
    kernel = "#define PAD 1\n" + KERNEL
    k, s = write(tmp_path, spec_text, kernel)
    from optiml.spec import load_spec

    spec = load_spec(s, k, kernel_source=kernel)
    harness = RecordingFakeHarness()
    ev = evaluator(spec, kernel, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), harness)
    r = ev.evaluate(Candidate(kernel.replace("#define PAD 1", "#define PAD (1 << 40)")))
    assert r.status == "launch_config_error" and "2**40 bytes" in r.message and harness.jobs == []


HEAVY = """#define BLOCK 1024
__global__ void scale(const float* x, float* y, int n, float alpha) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    float a[160];
#pragma unroll
    for (int j = 0; j < 160; j++) a[j] = x[(i + j * 977) % n];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 160; j++) s += a[j] * a[159 - j] * (j + 1);
    if (i < n) y[i] = alpha * x[i] + s * 0.0f;
}
"""


def test_a_block_that_needs_more_registers_than_an_sm_has_never_reaches_the_gpu(tmp_path):
    ev, harness = make(tmp_path)
    r = ev.evaluate(Candidate(HEAVY))
    assert r.status == "launch_config_error" and "registers a thread, so a block of 1024 threads needs" in r.message
    assert "CUDA would refuse the launch" in r.message and harness.jobs == []
    ok = ev.evaluate(Candidate(HEAVY.replace("BLOCK 1024", "BLOCK 512")))    # half the block fits
    assert ok.status == "ok" and ok.resources.registers * 512 <= 65536


def test_the_register_rule_counts_whole_warps_in_units_of_256():
    from types import SimpleNamespace

    from optiml.runner.prepare import register_problem
    at = lambda *block: [SimpleNamespace(block=block)]       # noqa: E731
    assert register_problem(64, at(1024, 1, 1)) is None                  # 32 warps x 2048 = 65536
    assert register_problem(65, at(1024, 1, 1)) is not None              # 72 a thread: 32 x 2304
    assert register_problem(72, at(896, 1, 1)) is None                   # 28 warps x 2304 = 64512
    assert register_problem(66, at(992, 1, 1)) is not None               # 31 x 2304 (66 x 32 = 2112 rounds up)
    assert register_problem(255, at(256, 1, 1)) is None and register_problem(255, at(257, 1, 1)) is not None
    assert register_problem(0, at(1024, 1, 1)) is None                   # unknown: the GPU will say


def test_an_evaluation_records_its_wall_time_and_its_wait_for_the_gpu(tmp_path):
    """The stored stage times: the build, the wait for a GPU worker, and the whole evaluation's
    wall time (at least the build); a CPU stage has no wait of its own recorded."""
    ev, harness = make(tmp_path)
    r = ev.evaluate(Candidate(KERNEL))
    assert {"parse", "build", "gpu_queue", "gpu"} <= set(r.stage_s) and "build_queue" not in r.stage_s
    assert r.wall_s >= r.stage_s["build"] > 0


def test_the_strict_tolerances_are_those_of_the_outputs_dtypes():
    """An output of another type than the inputs (float16 in, float32 out): its loosened float32
    tolerance is brought back to the defaults; a spec already stricter than the defaults is kept."""
    import numpy as np

    from optiml.runner.judge import strict_tolerances
    from optiml.spec import spec_from_arrays

    widen = ("#include <cuda_fp16.h>\n__global__ void widen(const __half* x, float* y, int n) {\n"
             "    int i = blockIdx.x * 64 + threadIdx.x;\n    if (i < n) y[i] = __half2float(x[i]);\n}\n")
    args = [np.ones(64, np.float16), np.zeros(64, np.float32), 64]
    loose = spec_from_arrays(widen, args, outputs=["y"], grid=["cdiv(N0, 64)"], block=[64], atol=1.0, rtol=0.5)
    t = strict_tolerances(loose).tolerance("float32")
    assert (t.atol, t.rtol, t.rel_rms) == (1e-4, 1e-4, 1e-3)
    tight = spec_from_arrays(widen, args, outputs=["y"], grid=["cdiv(N0, 64)"], block=[64], atol=1e-6, rtol=0.0)
    t = strict_tolerances(tight).tolerance("float32")
    assert (t.atol, t.rtol) == (1e-6, 0.0)


def test_a_compile_error_is_its_first_error_and_a_count_of_the_others(tmp_path):
    """nvcc's first error line, then how many more there are (none said for one; one for two)."""
    ev, _ = make(tmp_path)
    one = ev.evaluate(Candidate(KERNEL.replace("alpha * x[i]", "alpha * x[i] + nope1")))
    two = ev.evaluate(Candidate(KERNEL.replace("alpha * x[i]", "alpha * x[i] + nope1 + nope2")))
    three = ev.evaluate(Candidate(KERNEL.replace("alpha * x[i]", "alpha * nope3 * x[i] + nope1 + nope2")))
    assert one.status == two.status == three.status == "compile_error"
    assert 'identifier "nope1" is undefined' in one.message and "more)" not in one.message
    assert two.message.endswith(" (and 1 more)") and three.message.endswith(" (and 2 more)"), (two.message, three.message)
