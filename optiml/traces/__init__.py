"""Traces: the trajectory store in SQLite (issue 4)."""
