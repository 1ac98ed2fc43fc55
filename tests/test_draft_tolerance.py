"""Drafted tolerances (optiml/draft/tolerance.py): the dtype, the reduction length and the reference's
magnitude at the timing size decide them, and the reason is written beside each."""
import math

import pytest

from optiml import dtypes
from optiml.draft.tolerance import draft_tolerance, extrapolate_rms, tolerance_lines
from tests.test_kernelbench import draft, need_torch

SOFTMAX_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 512
dim = 262144


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

SOFTMAX_KERNEL = '''
#define BLOCK 256
__global__ void soft(const float* in, float* out, int rows, int cols) {
    int r = blockIdx.x;
    if (threadIdx.x != 0) return;
    float m = -INFINITY, s = 0.f;
    for (int j = 0; j < cols; j++) m = fmaxf(m, in[r * cols + j]);
    for (int j = 0; j < cols; j++) s += expf(in[r * cols + j] - m);
    for (int j = 0; j < cols; j++) out[r * cols + j] = expf(in[r * cols + j] - m) / s;
}
'''


def parse(value: str) -> dict:
    return {k.strip(): float(v) for k, v in (kv.split("=") for kv in value.strip("{} ").split(","))}


def test_the_defaults_where_nothing_is_known():
    value, why = draft_tolerance("float32")
    assert parse(value) == {"atol": 1e-4, "rtol": 1e-4, "rel_rms": 1e-3}
    assert "lower it" in why and "relative check" in why
    assert draft_tolerance("int32") is None and draft_tolerance("bool") is None


def test_small_outputs_lower_atol_to_their_magnitude():
    value, why = draft_tolerance("float32", rms=2.5e-6, rms_said=", measured")
    assert parse(value)["atol"] == pytest.approx(2e-9)          # 10 x 1e-4 x 2.5e-6, rounded down
    assert "2.5e-06, measured" in why
    assert parse(draft_tolerance("float32", rms=50.0)[0])["atol"] == 1e-4      # large outputs: the default
    # the edge: 10 rtol x RMS just under the default atol lowers it; just over keeps it
    assert parse(draft_tolerance("float32", rms=1e-4 / (10.5 * 1e-4))[0])["atol"] == pytest.approx(9e-5)
    assert parse(draft_tolerance("float32", rms=1e-4 / (9.5 * 1e-4))[0])["atol"] == 1e-4


def test_a_long_reduction_raises_rtol_and_rel_rms_only_past_the_defaults():
    assert parse(draft_tolerance("float32", reduction=4096)[0]) == {"atol": 1e-4, "rtol": 1e-4, "rel_rms": 1e-3}
    value, why = draft_tolerance("float32", reduction=1.6e9)     # 4 u sqrt(K) = 9.5e-3
    v = parse(value)
    assert v["rtol"] == pytest.approx(1e-2) and v["rel_rms"] == pytest.approx(1e-2) and "1.6e+09 terms" in why
    assert parse(draft_tolerance("float16", reduction=4096)[0]) == {"atol": 1e-2, "rtol": 1e-2, "rel_rms": 1e-2}


def test_extrapolation_follows_a_power_law_in_the_size():
    # an output whose RMS halves when the size quadruples: RMS ~ size^-1/2
    assert extrapolate_rms([(100, 0.1), (400, 0.05)], 40_000) == pytest.approx(0.005)
    # the two largest sizes decide: the trend nearest the problem's size
    assert extrapolate_rms([(10, 1.0), (400, 0.05), (100, 0.1)], 40_000) == pytest.approx(0.005)
    assert extrapolate_rms([(100, 0.0)], 1e6) is None
    assert extrapolate_rms([(100, 0.3)], 1e6) == 0.3              # one size: no trend to follow
    wild = extrapolate_rms([(100, 1.0), (101, 100.0)], 1e4)       # a steep fit is held to size^2
    assert wild == pytest.approx(100.0 * (1e4 / 101) ** 2)


def test_tolerance_lines_write_one_entry_a_dtype_with_its_reason():
    lines = tolerance_lines({"float32": (None, 3e-6, ""), "int32": (None, None, "")})
    assert lines[0].startswith("[tolerance]") and lines[1].startswith("# float32: ") and len(lines) == 3
    assert tolerance_lines({"int64": (None, None, "")}) == []


def test_init_kernelbench_drafts_atol_from_the_long_rows_magnitude(tmp_path):
    need_torch()
    spec, text = draft(tmp_path, SOFTMAX_TASK, "soft", SOFTMAX_KERNEL)
    t = spec.tolerance("float32")
    true_rms = 1.0 / 262144 * math.sqrt((math.e ** 2 - 1) / 2) / (math.e - 1)   # softmax of U(0, 1) rows
    assert t.atol < 1e-3 * true_rms * 100 and t.atol < dtypes.DEFAULT_TOLERANCES["float32"][0] / 1000
    assert t.atol > 0 and t.rtol == 1e-4 and t.rel_rms == 1e-3
    assert "extrapolated from" in text and "at the verify sizes" in text


def test_init_without_a_task_writes_the_defaults_with_the_reason(tmp_path):
    from optiml.draft import draft_spec

    text = draft_spec(SOFTMAX_KERNEL, tmp_path / "soft.cu")
    assert "float32 = { atol = 0.0001, rtol = 0.0001, rel_rms = 0.001 }" in text
    assert "# float32: " in text and "relative check holds there regardless" in text


def test_a_size_of_one_counts_in_the_fit_and_a_sum_of_two_terms_is_named():
    assert extrapolate_rms([(1.0, 1.0), (4.0, 4.0)], 16.0) == pytest.approx(16.0)
    assert "(sums of 2 terms fit them)" in draft_tolerance("float32", reduction=2)[1]
    assert "terms" not in draft_tolerance("float32", reduction=1)[1]
