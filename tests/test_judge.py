"""The judge's own choices, without a GPU or a build: what it tells the user once a run, and which
precision the diagnosis of a profile speaks of."""
from loguru import logger

from optiml.profiler.types import ProfileResult, ProfileStatus
from optiml.runner import Preparer
from optiml.runner.judge import judge, with_diagnosis
from optiml.runner.types import Evaluation
from optiml.verify.compare import CaseCheck, OutputCheck
from optiml.verify.harness import HarnessJob, HarnessResult, KernelBinary
from tests.test_spec import KERNEL, SPEC, load


def _job(spec):
    return HarnessJob(spec=spec, candidate=KernelBinary("k.cubin", "scale", (), {}), reference=None, cases=())


def _vacuous(name="y"):
    """A passing check whose output's atol (1e-4) exceeds the reference's RMS (1e-6)."""
    out = OutputCheck(name=name, elements=77, atol=1e-4, ref_rms=1e-6)
    return HarnessResult("ok", checks=[CaseCheck(2, {"N": 77}, 1, True, outputs=[out])])


def test_a_vacuous_atol_is_said_once_a_run_for_each_output(tmp_path):
    spec = load(tmp_path)
    prep = Preparer(spec, KERNEL, builder=None)
    seen = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    logger.enable("optiml")
    try:
        judge(prep, Evaluation("running"), _job(spec), _vacuous(), harness=None)
        assert sum("y: atol 0.0001 exceeds the reference's RMS 1e-06" in s for s in seen) == 1   # at once
        for _ in range(2):
            judge(prep, Evaluation("running"), _job(spec), _vacuous(), harness=None)
        judge(prep, Evaluation("running"), _job(spec), _vacuous("z"), harness=None)
    finally:
        logger.remove(sink)
        logger.disable("optiml")
    assert sum("y: atol" in s for s in seen) == 1 and sum("z: atol" in s for s in seen) == 1
    # a new run says it again
    again = Preparer(spec, KERNEL, builder=None)
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    logger.enable("optiml")
    try:
        judge(again, Evaluation("running"), _job(spec), _vacuous(), harness=None)
    finally:
        logger.remove(sink)
        logger.disable("optiml")
    assert sum("y: atol" in s for s in seen) == 2


HALF_INPUTS = """
[kernel]
entry = "mix"

[sizes]
timing = { N = 4096 }
verify = [{ N = 64 }, { N = 77 }]

[[args]]
name = "a"
dtype = "float16"
role = "input"
shape = ["N"]

[[args]]
name = "y"
dtype = "float32"
role = "output"
shape = ["N"]

[[args]]
name = "n"
dtype = "int32"
role = "scalar"
value = "N"

[launch]
grid = ["cdiv(N, 128)"]
block = [128]

[counts]
flops = "1000 * N"
bytes = "6 * N"
"""

MIX = """#include <cuda_fp16.h>
__global__ void mix(const __half* a, float* y, int n) {
    int i = blockIdx.x * 128 + threadIdx.x;
    if (i < n) y[i] = __half2float(a[i]);
}
"""


def test_the_diagnosis_reads_half_precision_from_the_inputs(tmp_path):
    """Half-precision inputs with a float32 output and many FLOPs a byte: a half matrix product, so
    a profile with an idle tensor pipe says the tensor cores are unused."""
    spec = load(tmp_path, HALF_INPUTS, MIX)
    prof = ProfileResult(ProfileStatus.OK, metrics={"tensor_pipe_active_pct": 0.0})
    got = with_diagnosis(spec, Evaluation("ok"), _job(spec), prof)
    assert any(s.startswith("Tensor cores are unused (tensor pipe active 0.00% of peak)") for s in got.diagnosis)
    plain = load(tmp_path, SPEC)                     # float32 throughout: no such sentence
    got = with_diagnosis(plain, Evaluation("ok"), _job(plain), prof)
    assert not any("Tensor cores" in s for s in got.diagnosis)


def test_float32_inputs_with_many_flops_a_byte_are_not_read_as_a_half_product(tmp_path):
    """The same FLOPs a byte with float32 inputs (a half output does not count): no tensor-core sentence;
    and a failed profile comes back as it is, with no diagnosis."""
    prof = ProfileResult(ProfileStatus.OK, metrics={"tensor_pipe_active_pct": 0.0})
    for spec_text, kernel in [(HALF_INPUTS.replace('dtype = "float16"', 'dtype = "float32"'),
                               MIX.replace("const __half* a", "const float* a").replace("__half2float(a[i])", "a[i]")),
                              (HALF_INPUTS.replace('dtype = "float16"', 'dtype = "float32"').replace(
                                  'name = "y"\ndtype = "float32"', 'name = "y"\ndtype = "float16"'),
                               MIX.replace("const __half* a, float* y", "const float* a, __half* y")
                                  .replace("__half2float(a[i])", "__float2half(a[i])"))]:
        spec = load(tmp_path, spec_text, kernel)
        got = with_diagnosis(spec, Evaluation("ok"), _job(spec), prof)
        assert not any("Tensor cores" in s for s in got.diagnosis), got.diagnosis
    failed = ProfileResult.failure(ProfileStatus.ERROR, "ncu is not installed")
    assert with_diagnosis(spec, Evaluation("ok"), _job(spec), failed) is failed
