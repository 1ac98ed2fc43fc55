"""Edits: proposers and source transformations (issue 5)."""
