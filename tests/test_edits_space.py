"""The rules proposer in a declared tuning space: moves stay in the lists and the restrictions,
no other constant is tuned, and the moves are ranked by what the whole search measured."""
import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from optiml.edits.rules import RulesProposer
from optiml.edits.space import SpaceMoves
from optiml.edits.types import Measured, NodeView
from optiml.spec import load_spec
from optiml.spec.space import TuneSpace, apply_point, read_point

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "kernels"
sys.path.insert(0, str(ROOT / "bench" / "search_quality"))


class Rng:
    def random(self):
        return 0.5


def test_moves_stay_in_the_declared_lists_and_restrictions():
    spec = load_spec(DATA / "mm_template.toml", DATA / "mm_template.cu")
    src = (DATA / "mm_template.cu").read_text()
    prop = RulesProposer(space=spec.tune, size_sets=spec.all_size_sets)
    node = NodeView(source=src, entry=spec.entry, measured=(Measured(src, (), "ok", 1.0),))
    props = prop.propose(node, 20, Rng())
    moves = sorted(p.edit for p in props if "block_size" in p.edit)
    assert moves == ["block_size 16 -> 32", "block_size 16 -> 8"]
    assert not any(p.edit.startswith(("K ", "M ")) for p in props)          # no other integer is tuned
    for p in props:
        if "block_size" in p.edit:
            assert spec.tune_problem(p.source) is None
    tight = TuneSpace(spec.tune.params, ("block_size <= 16",))
    props = RulesProposer(space=tight, size_sets=spec.all_size_sets).propose(node, 20, Rng())
    assert [p.edit for p in props if "block_size" in p.edit] == ["block_size 16 -> 8"]


BOWL = TuneSpace((("A", tuple(range(8))), ("B", tuple(range(8)))))
SRC = "#define A 0\n#define B 0\n__global__ void k(float* x) { x[0] = A + B; }\n"


def bowl_ms(a, b):
    return 1.0 + 0.1 * ((a - 5) ** 2 + (b - 6) ** 2)


def test_the_ranking_follows_the_measurements_of_the_whole_tree():
    """Measured: fast near (5, 6), slow elsewhere. From (0, 0) the best-ranked move goes that way;
    a point already in the tree is not proposed again."""
    measured = [Measured(apply_point(SRC, "k", {"A": a, "B": b}), (), "ok", bowl_ms(a, b))
                for a, b in [(0, 0), (4, 0), (0, 6), (4, 6), (1, 1)]]
    node = NodeView(source=SRC, entry="k", measured=tuple(measured))
    props = RulesProposer(space=BOWL, space_only=True).propose(node, 3, Rng())
    first = read_point(props[0].source, "k", BOWL)
    assert abs(first["A"] - 5) + abs(first["B"] - 6) <= 2, first        # towards the fast corner
    assert all(read_point(p.source, "k", BOWL) not in ({"A": 4, "B": 6}, {"A": 4, "B": 0}) for p in props)
    assert props[0].prior >= props[-1].prior


def test_a_replayed_search_finds_the_bowls_bottom_faster_than_blind_sampling():
    """The real MCTS over a recorded 64-point space (answers from the table): the median over seeds
    of evaluations to reach the optimum is well below blind sampling's (about 32)."""
    from space_replay import optiml_trace

    points = [[a, b, "ok", bowl_ms(a, b)] for a in range(8) for b in range(8)]
    space = {"tune_params": {"A": list(range(8)), "B": list(range(8))}, "restrictions": [],
             "seed_point": {"A": 0, "B": 0}, "points": points}
    needed = []
    for seed in range(5):
        trace = optiml_trace(space, seed, 40)
        needed.append(next((i for i, t in enumerate(trace, 1) if t is not None and t <= 1.0), math.inf))
    assert statistics.median(needed) <= 16, needed


def test_optimize_gives_the_rules_the_specs_declared_space():
    from optiml.app.optimize import make_proposer

    spec = load_spec(DATA / "mm_template.toml", DATA / "mm_template.cu")
    prop = make_proposer("rules", None, None, 10.0, spec)
    assert prop.space == spec.tune and prop.size_sets == tuple(spec.all_size_sets)
    assert make_proposer("rules", None, None, 10.0, None).space is None


class FakeStencilGpu:
    """A fake GPU for the search loop (not a GPU result): a smooth runtime over the stencil's
    declared space, flags and qualifiers changing nothing but noise; 40 registers a thread."""

    def __init__(self, spec):
        self.spec = spec

    def evaluate(self, source, flags):
        import hashlib

        from optiml.search.result import Result

        p = read_point(source, self.spec.entry, self.spec.tune)
        t = 1.0 + 0.05 * abs(p["BLOCK_X"] - 64) / 16 + 0.1 * abs(p["BLOCK_Y"] - 4) + 0.05 * p["ROWS_PER_THREAD"]
        noise = int(hashlib.sha1((source + str(flags)).encode()).hexdigest()[:6], 16) / 16 ** 6
        return Result("ok", median_ms=t * (1 + 0.004 * noise), spread=0.005, resources={"registers": 40})


def test_a_memory_bound_stencil_spends_few_evaluations_on_flags():
    """examples/stencil2d (no division, root or transcendental: fast math cannot matter) at budget
    150: at most 10 % of the budget goes to flag variants, every valid point of the space is measured
    and the best one found; then the search stops (nothing repeated to fill the budget)."""
    from optiml.edits.space import SpaceMoves
    from optiml.search.mcts import MCTS, SearchConfig

    kernel = ROOT / "examples" / "stencil2d" / "stencil2d.cu"
    spec = load_spec(kernel.with_suffix(".toml"), kernel)
    search = MCTS(kernel.read_text(), FakeStencilGpu(spec), RulesProposer(space=spec.tune, size_sets=spec.all_size_sets),
                  entry=spec.entry, config=SearchConfig(budget=150, seed=0))
    best = search.run()
    flags = [n for n in search.nodes[1:] if n.edit.startswith("flag")]
    assert len(flags) <= 15, [n.edit for n in flags]
    moves = SpaceMoves(spec.tune, spec.entry, spec.all_size_sets)
    valid = {tuple(p.values()) for p in spec.tune.points() if moves.valid(tuple(p.values()))}
    assert valid <= {moves.point(n.source) for n in search.nodes}
    edits = [n.edit for n in search.nodes[1:] if not n.edit.startswith(("flag", "BLOCK", "ROWS"))]
    assert len(edits) <= 10, edits         # not the same __restrict__ or launch bounds again and again
    assert not any("use_fast_math" in n.edit for n in flags)
    assert read_point(best.source, spec.entry, spec.tune) == {"BLOCK_X": 64, "BLOCK_Y": 4, "ROWS_PER_THREAD": 1}


def test_the_model_sees_each_values_list_spanning_one_whatever_its_length():
    """The same measurements at the same relative places of a 3-value and a 5-value list (its ends and
    its middle) score the middle alike: the model's distances are in units of the list's span."""
    def middle_score(values):
        space = TuneSpace((("A", values),))
        src = "#define A 1\n__global__ void k(float* x) { x[0] = A; }\n"
        moves = SpaceMoves(space, "k")
        ends = [Measured(apply_point(src, "k", {"A": v}), (), "ok", ms) for v, ms in ((values[0], 2.0), (values[-1], 1.0))]
        data, _ = moves._data(ends)
        return moves.scores([(values[len(values) // 2],)], data)[0]
    assert middle_score((1, 2, 3)) == pytest.approx(middle_score((1, 2, 3, 4, 5)), abs=1e-9)
