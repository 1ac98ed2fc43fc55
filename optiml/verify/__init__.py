"""Verify: GPU harness in a child process, verification against a reference, timing."""
