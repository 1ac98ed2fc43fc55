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
