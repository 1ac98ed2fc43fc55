"""How a node's Nsight Compute profile weighs the rules proposer's structural rewrites
(optiml/edits/rules.py ``profile_reason``): the factor on each rewrite's prior and the sentence kept
with the proposal, at each threshold; a profile that says nothing (or a metric that is no number)
leaves the prior as it is and says nothing."""
import pytest

from optiml.edits.rules import profile_reason


@pytest.mark.parametrize("kind, metrics, want", [
    # reductions: barrier stalls first, then DRAM under half its peak
    ("accumulate", {"stall_barrier": 0.5, "dram_throughput_pct": 10.0},
     (1.3, "The profile shows 0.50 warps per issue cycle stalled at barriers: the reduction's steps cost.")),
    ("shuffle", {"stall_barrier": 0.49, "dram_throughput_pct": 49.6},
     (1.2, "The profile shows DRAM at 50 % of its peak: the loads do not stream.")),
    ("partials", {"stall_barrier": 0.49, "dram_throughput_pct": 50.0}, (1.0, "")),
    # caching a row: DRAM busy from 60 % on
    ("cache", {"dram_throughput_pct": 60.0},
     (1.4, "The profile shows DRAM at 60 % of its peak: reading each element once saves traffic.")),
    ("cache", {"dram_throughput_pct": 59.9}, (1.0, "")),
    # wider or fewer memory instructions: DRAM under 70 %
    ("vectorize", {"dram_throughput_pct": 69.9},
     (1.2, "The profile shows DRAM at 70 % of its peak: fewer, wider memory instructions help it stream.")),
    ("coarsen", {"dram_throughput_pct": 70.0}, (1.0, "")),
    ("coarsen", {"dram_throughput_pct": 20.0},
     (1.2, "The profile shows DRAM at 20 % of its peak: fewer, wider memory instructions help it stream.")),
    # a block-size knob: occupancy under half, limited by warps or blocks
    ("knob", {"achieved_occupancy_pct": 49.0, "occupancy_limiters": "registers,blocks"},
     (1.3, "The profile shows 49 % achieved occupancy, limited by warps or blocks per SM.")),
    ("knob", {"achieved_occupancy_pct": 49.0, "occupancy_limiters": "registers"}, (1.0, "")),
    ("knob", {"achieved_occupancy_pct": 50.0, "occupancy_limiters": "warps"}, (1.0, "")),
    # nothing measured, a metric that is no number, or a rewrite the profile says nothing about
    ("cache", {}, (1.0, "")),
    ("accumulate", {"stall_barrier": "n/a", "dram_throughput_pct": "n/a"}, (1.0, "")),
    ("pad", {"dram_throughput_pct": 5.0, "stall_barrier": 2.0}, (1.0, "")),
])
def test_the_profile_weighs_each_rewrite_at_its_threshold(kind, metrics, want):
    assert profile_reason(kind, metrics) == want
