"""Edits: proposers and source transformations."""
