"""The one rule for the best candidate (optiml.best), shared by the search and the store."""
from optiml.best import Ranked, choose_best


def test_an_extra_edit_must_beat_the_noise_band():
    pad = Ranked("pad", 15.22, 0.0005, 1, 2)
    fast_math = Ranked("pad+fast_math", 15.13, 0.0005, 2, 16)        # 0.6 % faster: noise
    assert choose_best([pad, fast_math]).key == "pad"
    real = Ranked("pad+tile", 14.5, 0.0005, 2, 17)                     # 4.7 % faster: real
    assert choose_best([pad, fast_math, real]).key == "pad+tile"
    wide = Ranked("wide", 15.0, 0.05, 2, 3)                            # its own spread is 5 %: band 10 %
    assert choose_best([wide, Ranked("seed", 16.4, 0.05, 0, 1)]).key == "seed"


def test_nothing_verified_nothing_best():
    assert choose_best([]) is None
    assert choose_best([Ranked("x", None, 0.01, 1, 1)]) is None


def test_among_equal_edits_in_the_band_the_faster_wins_not_the_older():
    """Two candidates one edit from the seed, both within the fastest's noise band: the faster is the
    best, whichever was made first (age breaks ties of speed only)."""
    from optiml.best import Ranked, choose_best
    older_slower = Ranked("a", 1.004, 0.01, 1, 1)
    newer_faster = Ranked("b", 1.000, 0.01, 1, 2)
    assert choose_best([older_slower, newer_faster]).key == "b"
    assert choose_best([newer_faster, older_slower]).key == "b"
    same_time = [Ranked("c", 1.0, 0.01, 1, 5), Ranked("d", 1.0, 0.01, 1, 3)]
    assert choose_best(same_time).key == "d"                   # a true tie: the older


def test_the_band_of_the_final_timing_holds_only_timed_candidates():
    """What optimize's final step times against each other: nothing when nothing was timed; an
    untimed or zero median (a failed or never-timed candidate) is never in it."""
    from optiml.best import in_band
    assert in_band([]) == [] and in_band([Ranked("x", None, 0.01, 1, 1)]) == []
    got = in_band([Ranked("none", None, None, 1, 1), Ranked("zero", 0.0, 0.01, 1, 2), Ranked("neg", -1.0, 0.01, 1, 3),
                   Ranked("slow", 1.5, 0.01, 1, 4), Ranked("a", 1.0, 0.01, 2, 5), Ranked("b", 1.015, 0.01, 1, 6)])
    assert [c.key for c in got] == ["a", "b"]


def test_a_candidate_exactly_at_the_edge_of_the_noise_band_is_in_it():
    """The band is the fastest median times 1 + twice its spread (here 1.0 ms and 0.25: up to 1.5 ms,
    exact in binary): 1.5 ms is within it, the next float above is not."""
    import math

    from optiml.best import in_band
    edge = [Ranked("fast", 1.0, 0.25, 1, 1), Ranked("edge", 1.5, 0.0, 1, 2), Ranked("past", math.nextafter(1.5, 2), 0.0, 1, 3)]
    assert [c.key for c in in_band(edge)] == ["fast", "edge"]
