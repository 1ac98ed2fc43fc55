"""Baseline for kb_softmax: torch.softmax over each row (what the task's Model calls, without the
Model around it)."""
import torch


def softmax(x, batch_size, dim):
    return torch.softmax(x, dim=1)
