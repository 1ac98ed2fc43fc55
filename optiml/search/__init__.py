"""Search: Monte Carlo tree search over proposed source edits (issue 5)."""
