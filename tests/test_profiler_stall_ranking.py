"""Which warp stall reasons a profile ranks: every reason with a non-zero figure, however small
(per-issue-cycle ratios are often below one), largest first."""
from pathlib import Path

from optiml.profiler.metrics import STALL_REASONS, stall_metric
from optiml.profiler.model import extract_metrics, top_stall_reasons
from optiml.profiler.ncu_csv import NcuLaunch, parse_raw_csv

DATA = Path(__file__).parent / "data" / "ncu"


def test_fractional_stall_figures_are_ranked():
    """On the naive sgemm (real H100 export) the sixth largest reason is math_pipe_throttle at 0.06
    warps per issue cycle: ranked, while the reasons at zero are not."""
    m = extract_metrics(parse_raw_csv((DATA / "h100_sgemm_naive_full_raw.csv").read_text()).launches[0])
    stalls = {r: m[f"stall_{r}"] for r in STALL_REASONS if m[f"stall_{r}"] is not None}
    ranked = top_stall_reasons(stalls, n=len(stalls))
    assert ranked[:6] == [("long_scoreboard", 18.51), ("lg_throttle", 12.16), ("not_selected", 4.73),
                          ("dispatch_stall", 2.84), ("wait", 1.97), ("math_pipe_throttle", 0.06)]
    assert [r for r, v in stalls.items() if v == 0] and all(v > 0 for _, v in ranked)


def test_a_kernel_whose_stalls_are_all_below_one_still_has_top_reasons():
    """A launch whose per-issue stall ratios are all under one (a kernel that rarely stalls) gets
    its three largest as top_stall_reasons, the plain key the diagnosis falls back on."""
    launch = NcuLaunch(id=0, kernel_name="k", block_size=None, grid_size=None, units={}, values={
        stall_metric("wait"): 0.9, stall_metric("long_scoreboard"): 0.5,
        stall_metric("barrier"): 0.2, stall_metric("branch_resolving"): 0.1, stall_metric("misc"): 0.0})
    assert extract_metrics(launch)["top_stall_reasons"] == "wait,long_scoreboard,barrier"
    assert top_stall_reasons({"wait": 0.9, "misc": 0.0}) == [("wait", 0.9)]
