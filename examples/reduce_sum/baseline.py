"""Baseline for reduce_sum: torch.sum (its reduction kernel) added into out[0]."""
import torch


def reduce_sum(x, out, N):
    out.add_(x[:N].sum())
