"""Trial runs that draft a first kernel's launch (optiml/draft/trial.py), checked with a fake host in
place of the CPU emulation: a launch's text as the draft's comments show it, the sentence a run's score
carries (empty where every output is right), the count of runs an Outcome reports, and the row count
and row length among the extents and launches tried."""
import numpy as np

from optiml.draft.trial import Case, Launch, Trial, agreement, block_sizes, launches, size_exprs


class FakeScaleHost:
    """A fake of the emulation's HostKernel for ``y[i] = a * x[i]`` over ``i < n``, one thread an
    element: each run computes, in numpy, what that launch would write, and is counted."""

    def __init__(self):
        self.calls = 0

    def run(self, grid, block, shared, values, timeout_s=20.0, sanitize=False):
        self.calls += 1
        y = np.array(values["y"], copy=True)
        threads = int(np.prod(grid)) * int(np.prod(block))
        m = min(int(values["n"]), threads, y.size)
        y[:m] = values["a"] * values["x"][:m]
        return {"y": y}


def _case(n: int) -> Case:
    x = np.arange(n, dtype=np.float32)
    return Case({"N": n}, {"x": x, "y": np.full(n, np.nan, np.float32)}, {"x": None, "y": 0.5 * x})


SCALARS = {"n": "N", "a": 0.5}


def test_a_launch_without_shared_memory_says_none_and_one_with_it_says_how_much():
    assert Launch(("cdiv(N, 256)",), ("256",)).text() == "grid [cdiv(N, 256)], block [256]"
    assert Launch(("N", "4"), ("32", "8"), "4 * 256").text() == \
        "grid [N, 4], block [32, 8], 4 * 256 bytes of shared memory"


def test_a_run_that_gets_every_output_right_carries_no_sentence_and_a_short_one_names_the_output():
    trial = Trial(FakeScaleHost(), [_case(300)], {})
    assert trial.score(SCALARS, Launch(("cdiv(N, 32)",), ("32",)), _case(300)) == (1.0, "")
    frac, why = trial.score(SCALARS, Launch(("2",), ("32",)), _case(300))      # 64 threads for 300 elements
    assert frac < 1.0 and why == "y differ from the task's"


def test_an_outcome_counts_exactly_the_runs_made():
    """The drafted launch verifies: one run at the smaller case, then one under the sanitizer at each
    case; the Outcome's count (said as "N tried" / "the N - 1 other ... tried") is those runs."""
    host = FakeScaleHost()
    trial = Trial(host, [_case(300), _case(200)], {})
    out = trial.search({"n": ["N"], "a": [0.5]}, [Launch(("cdiv(N, 32)",), ("32",))])
    assert out.verified and out.drafted_ok
    assert out.tried == host.calls == trial.runs == 3


def test_a_failed_search_counts_exactly_the_runs_made():
    host = FakeScaleHost()
    trial = Trial(host, [_case(300), _case(200)], {})
    out = trial.search({"n": ["N"], "a": [0.5, 0.25]}, [Launch(("2",), ("32",)), Launch(("3",), ("32",))])
    assert not out.verified
    assert out.tried == host.calls == trial.runs > 0


def test_a_rows_count_over_four_dimensions_comes_before_products_of_two_sizes():
    """The leading dimensions' product (a row count) is tried right after the trailing ones' (a row's
    length), before the products of any two sizes; the launches keep the first 8 extents, so it is
    among the grids tried."""
    dims = ["B", "C", "H", "W"]
    got = size_exprs(dims, dims)
    assert got[:9] == ["B", "C", "H", "W", "B * C * H * W", "C * H * W", "B * C * H", "H * W", "B * C"]
    tried = launches("__global__ void k(float *y) { y[blockIdx.x] = 0.f; }", {}, dims, dims,
                     Launch(("cdiv(B, 256)",), ("256",)))
    assert (("B * C * H",), ("256",)) in [(la.grid, la.block) for la in tried]


def test_three_sizes_not_all_in_the_output_give_their_product_last():
    """A count over three sizes (a batched product's B * M * N elements) is tried when the output
    names only two: after each size and each pair, the three together."""
    assert size_exprs(["B", "M", "N"], ["M", "N"]) == ["M", "N", "M * N", "B", "B * M", "B * N", "B * M * N"]


def test_the_block_sizes_tried_are_the_files_constants_from_a_warp_to_1024_then_the_usual_ones():
    source = "__shared__ float s[WARP];\n__shared__ float t[BIG];\n"
    constants = {"WARP": 32, "SMALL": 16, "BIG": 2048, "BLOCK_SIZE": 1024, "TPB": 31, "rate": 2.0}
    assert block_sizes(source, constants) == ["WARP", "BLOCK_SIZE", "256", "32", "128", "512", "1024"]


def test_agreement_is_the_fraction_of_elements_right():
    assert agreement(np.array([1, 2, 3, 4]), np.array([1, 2, 0, 4])) == 0.75
    want = np.array([1.0, 2.0, np.nan, 4.0], np.float32)
    assert agreement(np.array([1.0, 2.0005, np.nan, 5.0], np.float32), want) == 0.75
    assert agreement(np.array([1.0, 2.0, 0.0, 4.0], np.float32), want) == 0.75   # NaN where the task has NaN
    assert agreement(np.zeros(3), np.zeros(4)) == 0.0


class FakeBoundedHost(FakeScaleHost):
    """FakeScaleHost whose emulation refuses a case past 1000 elements as too large to run."""

    def run(self, grid, block, shared, values, timeout_s=20.0, sanitize=False):
        from optiml.draft.emulate import TOO_LARGE

        if int(values["n"]) > 1000:
            self.calls += 1
            return TOO_LARGE
        return super().run(grid, block, shared, values, timeout_s, sanitize)


def test_a_launch_right_only_at_small_sizes_is_caught_at_the_medium_sizes_when_the_large_do_not_run():
    """A grid of 2 blocks of 32 covers the 50 elements of the verify case but not 300: the large case
    (5000) is too large for the emulation, so the medium one decides, and the launch is not confirmed;
    one that covers every element is."""
    asked = []

    def larger(spread=None):
        asked.append(spread)
        return _case(5000 if spread is None else 300)
    trial = Trial(FakeBoundedHost(), [_case(50)], {}, larger=larger)
    assert trial.confirmed(SCALARS, Launch(("2",), ("32",))) == "y differ from the task's (at larger sizes)"
    assert asked == [None, (97, 193, 289, 385)]
    assert trial.confirmed(SCALARS, Launch(("cdiv(N, 32)",), ("32",))) == ""


class FakeDifferenceHost(FakeScaleHost):
    """A fake emulation of ``y[i] = (a - b) * x[i]`` over ``i < n``: only a and b changed together
    can give the task's 0.5."""

    def run(self, grid, block, shared, values, timeout_s=20.0, sanitize=False):
        return super().run(grid, block, shared, {**values, "a": values["a"] - values["b"]}, timeout_s, sanitize)


def test_two_scalars_that_are_right_only_together_are_found_by_changing_them_as_a_pair():
    """From a = 1, b = 0 (a - b = 1), a = 2 alone gives 2 and b = 1.5 alone gives -0.5: no single
    change gets more elements right, so the search changes the two together and finds a = 2, b = 1.5."""
    trial = Trial(FakeDifferenceHost(), [_case(300), _case(200)], {})
    out = trial.search({"n": ["N"], "a": [1.0, 2.0], "b": [0.0, 1.5]}, [Launch(("cdiv(N, 32)",), ("32",))])
    assert out.verified and not out.drafted_ok
    assert (out.scalars["a"], out.scalars["b"]) == (2.0, 1.5)
