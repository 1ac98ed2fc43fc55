"""Build cache entries read back by NvccBuilder: an entry written by an older optiml, whose
``symbols`` still named a template instantiated twice (or that had no ``symbols`` at all), is a
cache hit whose symbols are worked out again from its resources, so the ambiguous name is left out
and the builder does not pick one of the instantiations."""
import json
from dataclasses import asdict

from optiml.build import NvccBuilder, Resources, entry_problem, read_cached

SOURCE = """
template <typename T> __global__ void fill(T* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = T(1); }
template __global__ void fill<float>(float*, int);
template __global__ void fill<double>(double*, int);
__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }
"""
FILL_F, FILL_D = "_Z4fillIfEvPT_i", "_Z4fillIdEvPT_i"


def legacy_entry(builder: NvccBuilder, source: str, **overrides) -> str:
    """A successful cache entry at the builder's own key, as an older optiml wrote it; returns the key."""
    key = builder.key(source, ())
    d = builder.cache_dir / key
    d.mkdir(parents=True)
    (d / "kernel.cubin").write_bytes(b"FAKE CUBIN")
    resources = {FILL_F: Resources(registers=8), FILL_D: Resources(registers=10), "scale": Resources(registers=6)}
    meta = {"status": "ok", "key": key, "arch": builder.arch, "cubin_path": str(d / "kernel.cubin"),
            "log": "ptxas info", "resources": {k: asdict(v) for k, v in resources.items()},
            "symbols": {"fill": FILL_F, "scale": "scale"},       # the old answer: one of the two picked
            "wall_s": 1.0, "cached": False, "command": ["nvcc"]}
    meta.update(overrides)
    (d / "build.json").write_text(json.dumps(meta))
    return key


def test_an_old_cache_entry_is_a_hit_that_no_longer_picks_one_of_two_instantiations(tmp_path):
    builder = NvccBuilder("sm_90", cache_dir=tmp_path / "cache")
    key = legacy_entry(builder, SOURCE)
    result = builder.build(SOURCE)            # a hit: nvcc is not run (the cubin is the fake one)
    assert result.cached and result.ok and result.key == key
    assert result.symbols == {"scale": "scale"}
    assert result.entry_resources("fill") is None and result.entry_resources("scale").registers == 6
    assert sorted(result.instantiations("fill")) == sorted([FILL_F, FILL_D])
    assert "instantiated 2 times" in entry_problem(result, "fill")
    assert entry_problem(result, "scale") is None


def test_an_old_cache_entry_without_symbols_gets_them_from_its_resources(tmp_path):
    builder = NvccBuilder("sm_90", cache_dir=tmp_path / "cache")
    key = legacy_entry(builder, SOURCE, symbols=None)
    meta = json.loads((builder.cache_dir / key / "build.json").read_text())
    del meta["symbols"]
    (builder.cache_dir / key / "build.json").write_text(json.dumps(meta))
    result = read_cached(builder.cache_dir / key)
    assert result.cached and result.symbols == {"scale": "scale"}
    assert result.entry_resources("scale") == Resources(registers=6)


def test_a_cached_compile_error_keeps_its_status_and_log(tmp_path):
    builder = NvccBuilder("sm_90", cache_dir=tmp_path / "cache")
    key = legacy_entry(builder, SOURCE, status="compile_error", cubin_path=None, resources={}, symbols={},
                       log="kernel.cu(2): error: identifier \"y\" is undefined")
    result = builder.build(SOURCE)
    assert result.cached and result.status == "compile_error" and result.key == key
    assert result.symbols == {} and result.errors == ['kernel.cu(2): error: identifier "y" is undefined']
