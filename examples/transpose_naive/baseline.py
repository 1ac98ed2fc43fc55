"""Baseline for the transpose examples: torch's copy of the transposed view into the output."""
import torch


def transpose(out, ROWS, COLS, **arrays):
    out.copy_(arrays["in"].t())
