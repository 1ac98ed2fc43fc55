"""The KernelBench level-1 first kernels (bench/kernelbench/level1): what optiml offers each must not
regress. On an H100 every offer below verified against its task (bench/kernelbench/level1/check.py
--gpu, 2026-11-27); here, recognition only (the specs' references written first, as check.py writes
them)."""
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "bench" / "kernelbench" / "level1"
sys.path.insert(0, str(CORPUS))

OFFERED = {
    "relu_vec4": "elementwise",
    "sum_dim_block": "col_reduce",
    "mean_dim": "col_reduce",
    "max_dim": "col_reduce",
    "layernorm_block": "row_reduce",
    "gemv": "row_reduce",
    "elu": "elementwise",
    "frob_scale": "elementwise",
    "frob_sumsq": "reduce_all",
    "gelu_erf": "elementwise",
    "gelu_gridstride": "elementwise",
    "hardsigmoid": "elementwise",
    "hardtanh": "elementwise",
    "hinge": "reduce_all",
    "huber": "reduce_all",
    "kldiv": "reduce_all",
    "l1norm": "row_reduce",
    "l2norm": "row_reduce",
    "layernorm_onepass": "row_reduce",
    "leaky_relu": "elementwise",
    "logsoftmax_block": "row_reduce",
    "matmul_mkn": "gemm_f32_warp",
    "matmul_naive": "gemm_f32_warp",
    "matmul_tallskinny": "gemm_f32_warp",
    "matmul_tiled": "gemm_f32_warp",
    "matmul_tt": "gemm_f32_warp",
    "min_dim": "elementwise",
    "mse_atomic": "reduce_all",
    "mse_block": "reduce_all",
    "newgelu": "elementwise",
    "newgelu_2d": "elementwise",
    "relu": "elementwise",
    "rmsnorm_strided": "col_reduce",
    "rmsnorm_strided2d": "col_reduce",
    "scalar_mul": "elementwise",
    "selu": "elementwise",
    "sigmoid": "elementwise",
    "softmax_block": "row_reduce",
    "softmax_thread": "row_reduce",
    "softmax_warp": "row_reduce",
    "softplus": "elementwise",
    "softsign": "elementwise",
    "sum_dim": "elementwise",
    "swish": "elementwise",
    "tanh": "elementwise",
}


@pytest.fixture(scope="module")
def offers():
    import check
    return check.offers()


def test_each_kernel_offered_a_template_before_still_is(offers):
    got = {k: t for k, (t, _) in offers.items() if t}
    lost = {k: (v, offers[k][1]) for k, v in OFFERED.items() if got.get(k) != v}
    assert not lost, lost


def test_every_refusal_has_a_reason_and_none_is_a_crash(offers):
    refused = {k: why for k, (t, why) in offers.items() if not t}
    assert len(offers) == 47 and all(refused.values()), refused
    assert not [k for k, why in refused.items() if "failed (" in why], refused


@pytest.mark.parametrize("name, layouts", [("matmul_naive", ("mk", "kn")), ("matmul_tiled", ("mk", "kn")),
                                           ("matmul_tallskinny", ("mk", "kn")), ("matmul_mkn", ("mk", "kn")),
                                           ("matmul_tt", ("km", "nk"))])
def test_the_matmuls_are_read_with_their_operands_layouts(name, layouts):
    """Task 1 is square: its shapes allow either layout of each operand, and a wrong one (once the
    case) makes a template every point of which fails."""
    import check
    from optiml.edits.templates import recognize_gemm
    from optiml.spec import load_spec
    check.write_references([name])
    cu = CORPUS / "k" / f"{name}.cu"
    src = cu.read_text()
    spec = load_spec(cu.with_suffix(".toml"), cu, kernel_source=src)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None and (g.a_layout, g.b_layout) == layouts, why
