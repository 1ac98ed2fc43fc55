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
