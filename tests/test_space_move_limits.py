"""How far a move in a declared tuning space may go (:class:`optiml.edits.space.SpaceMoves`): with
``max_changed`` below the number of names, a neighbour differs in at most that many names; a space
searched whole offers every other valid point."""
from optiml.edits.space import SpaceMoves
from optiml.spec.space import TuneSpace

SPACE = TuneSpace((("A", (1, 2, 3)), ("B", (1, 2, 3)), ("C", (1, 2, 3))))


def _changed(p, q):
    return sum(a != b for a, b in zip(p, q))


def test_a_one_name_limit_offers_only_moves_of_one_name():
    moves = SpaceMoves(SPACE, "k", max_changed=1)
    out = moves.neighbours((1, 1, 1))
    assert sorted(out) == sorted([(2, 1, 1), (3, 1, 1), (1, 2, 1), (1, 3, 1), (1, 1, 2), (1, 1, 3)])


def test_a_two_name_limit_never_moves_all_three():
    moves = SpaceMoves(SPACE, "k", max_changed=2)
    out = moves.neighbours((1, 1, 1))
    assert len(out) == 6 + 12 and all(1 <= _changed(q, (1, 1, 1)) <= 2 for q in out)


def test_a_small_space_is_searched_whole_in_its_own_order():
    moves = SpaceMoves(SPACE, "k")
    out = moves.neighbours((2, 2, 2))
    every = [tuple(p.values()) for p in SPACE.points()]
    assert out == [q for q in every if q != (2, 2, 2)]


def test_moves_offer_the_best_256_of_a_larger_neighbourhood_each_once_best_first():
    from optiml.edits.types import NodeView

    values = tuple(range(1, 9))
    space = TuneSpace((("A", values), ("B", values), ("C", values)))     # 511 other points, all valid
    moves = SpaceMoves(space, "k")
    src = "#define A 1\n#define B 1\n#define C 1\n__global__ void k(float* x) { x[0] = A + B + C; }\n"
    out = moves.moves(NodeView(source=src, entry="k"))
    assert len(out) == 256 and len({edit for _, edit, _ in out}) == 256
    assert [s for _, _, s in out] == sorted(s for _, _, s in out)
    assert len(moves.moves(NodeView(source=src, entry="k"), limit=10)) == 10
