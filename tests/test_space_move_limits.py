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
