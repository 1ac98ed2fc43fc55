"""The speed-of-light arithmetic from fixed peaks: which rate a half-precision task is held to at
the matrix-product intensity threshold, and the unit a recorded bound's peak is given in."""
import pytest

from optiml.profiler.calibration import MATMUL_INTENSITY, speed_of_light
from optiml.profiler.diagnosis import DevicePeaks

# a GPU whose FP32 rate is slow enough that an fp16 task at 16 FLOP/byte is compute-bound at it,
# and whose tensor cores are ten times faster
PEAKS = DevicePeaks("X", 10_000.0, 10_000.0, "measured", fp16_tensor_gflops=100_000.0)


def test_an_fp16_task_at_exactly_the_threshold_intensity_is_held_to_fp32():
    """Only a task of MORE than MATMUL_INTENSITY FLOPs per byte counts as a matrix product (held to
    the tensor-core rate); one of exactly 16 FLOP/byte is held to the FP32 FMA rate."""
    assert MATMUL_INTENSITY == 16.0
    nbytes = 1e9
    at = speed_of_light(2.0, 16 * nbytes, nbytes, PEAKS, dtype="float16")
    assert (at.bound, at.peak, at.peak_name) == ("compute", 10_000.0, "fp32 (non-tensor) peak")
    assert at.bound_ms == pytest.approx(1.6) and at.fraction == pytest.approx(0.8)
    above = speed_of_light(2.0, 16.5 * nbytes, nbytes, PEAKS, dtype="float16")
    assert (above.bound, above.peak, above.peak_name) == ("compute", 100_000.0, "dense fp16 tensor-core peak")
    assert above.bound_ms == pytest.approx(0.165)


def test_the_recorded_peak_unit_follows_the_bound():
    """SpeedOfLight.to_dict (what a run records as its final speed of light) gives the peak in GB/s
    for a memory-bound task and in GFLOP/s for a compute-bound one."""
    memory = speed_of_light(0.2, None, 1e9, PEAKS).to_dict()
    assert (memory["bound"], memory["peak"], memory["peak_unit"]) == ("memory", 10_000.0, "GB/s")
    assert memory["fraction"] == 0.5 and memory["peak_name"] == "DRAM copy bandwidth"
    compute = speed_of_light(2.0, 16e9, 1e9, PEAKS, dtype="float16").to_dict()
    assert (compute["bound"], compute["peak"], compute["peak_unit"]) == ("compute", 10_000.0, "GFLOP/s")
