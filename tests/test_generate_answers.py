"""Reading the model's answers for `optiml generate` (no server, no GPU): strategies in the forms
models write them, a kernel from its fenced block, and each refusal's one sentence."""
import pytest

from optiml.generate import check_kernel, parse_kernel, parse_strategies, signature
from optiml.spec import parse_spec
from tests.test_generate import SPEC, kernel


@pytest.fixture
def spec(tmp_path):
    import tomllib

    (tmp_path / "ref.py").write_text("def scale(x, n, alpha):\n    return alpha * x\n")
    data = tomllib.loads(SPEC)
    return parse_spec(dict(data, launch={"grid": [1], "block": [1]}), tmp_path / "scale.toml")


def test_strategies_in_the_forms_models_write_them():
    answer = ("<think>STRATEGY 9: hidden</think>Sure!\n\n**Strategy 1: Warp per row** \nEach warp takes a row.\n"
              "more detail\n### STRATEGY 2) block per row\nShared-memory tree.\n- STRATEGY 3 - warp per row\n"
              "a repeat\nSTRATEGY 4: online softmax\none pass\n")
    got = parse_strategies(answer, 4)
    assert [s.name for s in got] == ["Warp per row", "block per row", "online softmax"]
    assert got[0].detail == "Each warp takes a row. more detail"
    assert [s.name for s in parse_strategies(answer, 2)] == ["Warp per row", "block per row"]
    assert parse_strategies("I would use a warp per row.", 4) == []


def test_kernel_from_its_fenced_block():
    k = parse_kernel("KERNEL: **warp per row**\nWHY: shuffles.\n```cpp\n// helper\n```\n```cuda\n"
                     "__global__ void f(float* y) { y[0] = 1; }\n```\ntrailing words")
    assert k.error is None and k.title == "warp per row" and k.why == "shuffles."
    assert k.source == "__global__ void f(float* y) { y[0] = 1; }\n"
    assert parse_kernel("KERNEL: x\nno code at all").error == "the answer has no ```cuda block holding a __global__ kernel."
    assert parse_kernel("  ").error == "the model returned an empty answer."


def test_signature_and_each_refusal_is_one_sentence(spec):
    sig = "__global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n, float alpha)"
    assert signature(spec) == sig
    assert check_kernel(spec, kernel(128)) is None
    want = f"; it must be `{sig}`."
    cases = {
        kernel(128).replace("void scale(", "void scale2("): "the source has no __global__ function named scale (found: scale2)",
        kernel(128, params="const float* x, float* y, int n"): "the entry scale takes 3 parameters (x, y, n) but the spec gives 4 (x, y, n, alpha)",
        kernel(128, params="const float* x, float* y, int n, float* alpha"): "parameter 'alpha' of scale is a pointer where the spec's alpha is a scalar",
        kernel(128, params="const float* x, double* y, int n, float alpha"): "parameter 'y' of scale is double* where the spec's y is float32",
        kernel(128, params="const float* x, const float* y, int n, float alpha"): "parameter 'y' of scale is const, but the kernel writes y",
    }
    for source, start in cases.items():
        why = check_kernel(spec, source)
        assert why == start + want, why
    assert check_kernel(spec, kernel(128, launch=False)) == (
        "the kernel has no // optiml:launch line; state the launch as // optiml:launch {grid = [...], block = [...], "
        "shared_mem = ...}.")
    partial = kernel(128, launch=False).replace("#define BLOCK 128\n", '#define BLOCK 128\n// optiml:launch {grid = [1]}\n')
    assert check_kernel(spec, partial).startswith("the // optiml:launch line does not give block or shared_mem;")
    assert check_kernel(spec, '#include "secret.h"\n' + kernel(128)).startswith("the kernel has #include \"secret.h\"")
