"""How a run's final figures are worded beside the kernel: against the baseline, and the nvcc
flags a written kernel file names."""
from optiml.traces.kernel_file import spec_flags
from optiml.traces.limits import baseline_text


def final(best_ms, base_ms):
    return {"best_ms": best_ms, "baseline": {"label": "torch.matmul", "status": "ok", "median_ms": base_ms}}


def test_the_baseline_figure_says_which_is_faster():
    assert baseline_text(final(0.5, 1.0)) == "2.00x over the baseline torch.matmul (1.0000 ms)"
    assert baseline_text(final(1.0, 1.0)) == "1.00x over the baseline torch.matmul (1.0000 ms)"     # a tie
    assert baseline_text(final(2.0, 1.0)) == ("2.00x slower than the baseline torch.matmul (1.0000 ms; "
                                              "50% of its speed)")


def test_a_spec_without_readable_flags_gives_the_default():
    assert spec_flags('[kernel]\nnvcc_flags = ["-O2", "-lineinfo"]\n') == ("-O2", "-lineinfo")
    assert spec_flags("[kernel]\nentry = 'k'\n") == ("-O3",) and spec_flags(None) == ("-O3",)
    assert spec_flags("[kernel\nnot toml") == ("-O3",) and spec_flags("[kernel]\nnvcc_flags = [1]\n") == ("-O3",)
