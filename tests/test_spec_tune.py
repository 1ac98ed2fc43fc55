"""The [tune] table: declared names found as macros, constexprs and template arguments; the launch
using them; restrictions; one sentence for each mistake."""
import shutil
from pathlib import Path

import pytest

from optiml.errors import SpecError
from optiml.spec import load_spec
from optiml.spec.space import apply_point, find_sites, parse_tune, read_point

DATA = Path(__file__).parent / "data" / "kernels"
MM = (DATA / "mm_template.cu").read_text()


def test_a_template_argument_of_the_entrys_call_is_a_tunable():
    spec = load_spec(DATA / "mm_template.toml", DATA / "mm_template.cu")
    assert spec.tune.names == ("block_size",) and spec.tune.values("block_size") == (8, 16, 32)
    assert read_point(MM, "product_bs16", spec.tune) == {"block_size": 16}
    assert read_point(MM, "product_bs8", spec.tune) == {"block_size": 8}
    launch = spec.resolve_launch(spec.timing_sizes, spec.source_info(MM))
    assert launch.block == (16, 16, 1) and launch.grid == (64, 64, 1)
    moved = apply_point(MM, "product_bs16", {"block_size": 32})
    assert "tiled_product<32, size_t>" in moved and "tiled_product<8, size_t>" in moved     # only the entry's call
    assert spec.resolve_launch(spec.timing_sizes, spec.source_info(moved)).block == (32, 32, 1)
    assert spec.tune_problem(moved) is None
    assert "does not hold" in spec.tune_problem(apply_point(MM, "product_bs16", {"block_size": 64}))


def test_defines_constexprs_and_explicit_instantiations():
    src = ("#define BX 16\nconstexpr int BY = 4;\ntemplate <int W> __global__ void k(float* x) { x[0] = W * BX * BY; }\n"
           "template __global__ void k<8>(float*);\n")
    sites = find_sites(src, "k", ["BX", "BY", "W", "Z"])
    assert [s.kind for s in sites["BX"]] == ["define"] and [s.kind for s in sites["BY"]] == ["constexpr"]
    assert [s.value for s in sites["W"]] == [8] and sites["Z"] == []
    out = apply_point(src, "k", {"BX": 32, "BY": 2, "W": 16})
    assert "#define BX 32" in out and "BY = 2;" in out and "k<16>(float*)" in out


def test_only_agreeing_positive_template_arguments_are_detected_as_tunables():
    """What `optiml init` offers to tune: a template argument the entry passes with one value
    everywhere, not one it passes with two values or as 0; a macro named like a tunable, not one of 0."""
    from optiml.spec.space import detected
    src = ("template <int W> __device__ void f(float* x) { x[0] = W; }\n"
           "template <int V> __device__ void g(float* x) { x[1] = V; }\n"
           "template <int U> __device__ void h(float* x) { x[2] = U; }\n"
           "#define BLOCK_X 0\n#define TILE 8\n"
           "__global__ void k(float* x) { f<16>(x); f<32>(x); g<0>(x); h<4>(x); h<4>(x); }\n")
    assert detected(src, "k") == {"TILE": (8, "define"), "U": (4, "template")}


@pytest.mark.parametrize("table, words", [
    ({"B": []}, "non-empty list"),
    ({"B": [1, 2.5]}, "integers only"),
    ({"B": [1, 1]}, "a value twice"),
    ({"B": [1], "restrictions": 3}, "list of expressions"),
    ({"B": [1], "restrictions": ["N > 1"]}, "names none of the tunables"),
    ({"restrictions": ["B > 1"]}, "names no tunable"),
    ({"1B": [1]}, "C identifier"),
    ({"B": [1], "restrictions": ["B <= "]}, "cannot parse"),
    ({"B": [1], "restrictions": ["B <= foo(2)"]}, "unknown function"),
    ("B = 3", "must be a table"),
])
def test_a_bad_tune_table_is_one_sentence(table, words):
    with pytest.raises(SpecError, match=words):
        parse_tune(table, "k.toml")


def test_a_declared_name_missing_from_the_kernel_is_refused(tmp_path):
    for f in ("mm_template.cu", "mm_template.toml"):
        shutil.copy(DATA / f, tmp_path / f)
    spec = tmp_path / "mm_template.toml"
    spec.write_text(spec.read_text().replace("block_size = [8, 16, 32]", "block_size = [8, 16, 32]\nTILE = [1, 2]"))
    with pytest.raises(SpecError, match=r"tune.TILE: .* has no #define, constexpr or template argument"):
        load_spec(spec, tmp_path / "mm_template.cu")


def test_init_drafts_a_commented_tune_table_that_still_loads(tmp_path):
    """optiml init: the template argument and tunable macros are proposed, commented out; the draft
    loads; uncommenting the proposal gives a valid [tune] table."""
    from optiml.draft import draft_spec

    text = draft_spec(MM, tmp_path / "mm.cu", "product_bs16")
    assert "# [tune]" in text and "# block_size = [4, 8, 16, 32, 64]" in text
    import tomllib
    data = tomllib.loads(text)
    assert "tune" not in data
    lines = [ln[2:].split("  #")[0] for ln in text.splitlines() if ln.startswith(("# [tune]", "# block_size"))]
    tune = tomllib.loads("\n".join(lines))["tune"]
    assert parse_tune(tune, "x").values("block_size") == (4, 8, 16, 32, 64)
    plain = "#define SCALE 3\n#define BLOCK 128\n__global__ void k(float* x) { x[0] = 1; }\n"
    text = draft_spec(plain, tmp_path / "k.cu")
    assert "# BLOCK = [32, 64, 128, 256, 512]" in text and "SCALE" not in text.split("# [tune]")[1]


def test_the_documented_matrixmul_spec_loads():
    """docs/spec.md's [tune] example (the cuda-samples matrixMul spec) is a valid spec."""
    import re
    import tomllib

    from optiml.spec import parse_spec

    doc = (Path(__file__).resolve().parents[1] / "docs" / "spec.md").read_text()
    block = next(b for b in re.findall(r"```toml\n(.*?)```", doc, re.S) if "matrixMul_bs16_64bit" in b)
    spec = parse_spec(tomllib.loads(block), Path("matrixMul_kernel.toml"))
    assert spec.tune.values("block_size") == (8, 16, 32)
    assert spec.tune.violated({"block_size": 32}, spec.all_size_sets) is None


def test_a_tunable_named_like_a_size_is_refused(tmp_path):
    for f in ("mm_template.cu", "mm_template.toml"):
        shutil.copy(DATA / f, tmp_path / f)
    spec = tmp_path / "mm_template.toml"
    spec.write_text(spec.read_text().replace("block_size = [8, 16, 32]", "block_size = [8, 16, 32]\nK = [1, 2]"))
    with pytest.raises(SpecError, match="tune.K is also a size"):
        load_spec(spec, tmp_path / "mm_template.cu")
