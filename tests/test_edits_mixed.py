"""The mixed proposer over two fake proposers (named as fakes: each returns numbered edits)."""
import random

from optiml.edits.mixed import MixedProposer
from optiml.edits.types import NodeView, Proposal


class FakeProposer:
    def __init__(self, name, available):
        self.name, self.available, self.asked = name, available, []

    def propose(self, node, k, rng):
        self.asked.append(k)
        tried = {a.edit for a in node.attempts}
        edits = [f"{self.name} {i}" for i in range(self.available) if f"{self.name} {i}" not in tried]
        return [Proposal(node.source + e, (), e, "fake", proposer=self.name) for e in edits[:k]]


def test_shares_k_between_proposers():
    a, b = FakeProposer("rules", 10), FakeProposer("llm", 10)
    out = MixedProposer([a, b]).propose(NodeView(source="s"), 5, random.Random(0))
    assert [p.edit for p in out] == ["rules 0", "rules 1", "rules 2", "llm 0", "llm 1"]
    assert a.asked == [3] and b.asked == [2]


def test_shortfall_is_taken_from_the_proposers_that_still_have_ideas():
    a, b = FakeProposer("rules", 10), FakeProposer("llm", 0)
    out = MixedProposer([a, b]).propose(NodeView(source="s"), 4, random.Random(0))
    assert [p.edit for p in out] == ["rules 0", "rules 1", "rules 2", "rules 3"]
    assert MixedProposer([FakeProposer("x", 0), FakeProposer("y", 0)]).propose(NodeView(source="s"), 4, None) == []


def test_every_proposer_is_asked_when_k_is_small():
    """k = 3 over two: shares 2 and 1, both asked."""
    a, b = FakeProposer("rules", 10), FakeProposer("llm", 10)
    out = MixedProposer([a, b]).propose(NodeView(source="s"), 3, random.Random(0))
    assert [p.edit for p in out] == ["rules 0", "rules 1", "llm 0"] and a.asked == [2] and b.asked == [1]


def test_a_shortfall_of_one_is_filled():
    a, b = FakeProposer("rules", 10), FakeProposer("llm", 1)
    out = MixedProposer([a, b]).propose(NodeView(source="s"), 4, random.Random(0))
    assert [p.edit for p in out] == ["rules 0", "rules 1", "llm 0", "rules 2"]


def test_a_proposer_without_a_share_fills_the_shortfall_and_is_never_asked_for_none():
    """k = 1 (the search widens one child at a time): the first proposer's share; when it has no
    idea the second is asked, so the node is not exhausted while it still has ideas. No proposer
    is asked for 0 proposals (an LLM would spend a request on nothing)."""
    a, b = FakeProposer("rules", 10), FakeProposer("llm", 10)
    assert [p.edit for p in MixedProposer([a, b]).propose(NodeView(source="s"), 1, random.Random(0))] == ["rules 0"]
    assert a.asked == [1] and b.asked == []
    a, b = FakeProposer("rules", 0), FakeProposer("llm", 10)
    assert [p.edit for p in MixedProposer([a, b]).propose(NodeView(source="s"), 1, random.Random(0))] == ["llm 0"]
    assert a.asked == [1] and b.asked == [1]
