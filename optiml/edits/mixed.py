"""The ``mixed`` proposer: several proposers share each expansion (``--proposer mixed``: the
offline rules and an LLM), so cheap safe edits and open-ended ones compete in one tree."""
from __future__ import annotations

from .types import NodeView, Proposal


class MixedProposer:
    """Asks each proposer for its share of ``k`` (the first ones get the remainder); when one
    has nothing, the others are asked for the shortfall, so the node is not declared exhausted
    while any of them still has ideas."""

    def __init__(self, proposers, name: str = "mixed"):
        if not proposers:
            raise ValueError("MixedProposer needs at least one proposer")
        self.proposers = list(proposers)
        self.name = name

    def propose(self, node: NodeView, k: int, rng) -> list[Proposal]:
        n = len(self.proposers)
        shares = [k // n + (1 if i < k % n else 0) for i in range(n)]
        out: list[Proposal] = []
        refused: dict[str, Proposal] = {}      # records of rewrites not made: outside the shares
        short, full = 0, []
        for p, share in zip(self.proposers, shares):
            if share <= 0:                     # not asked (k smaller than the proposers): may fill the shortfall
                full.append((p, 0))
                continue
            got = list(p.propose(node, share, rng))
            refused.update((x.edit, x) for x in got if x.refused)
            got = [x for x in got if not x.refused][:share]
            short += share - len(got)
            out += got
            if len(got) == share:
                full.append((p, share))
        for p, share in full:                  # the shortfall from those that still had ideas
            if short <= 0:
                break
            seen = {x.edit for x in out}
            extra = [x for x in p.propose(node, share + short, rng) if x.edit not in seen and not x.refused][:short]
            out += extra
            short -= len(extra)
        return out[:k] + list(refused.values())
