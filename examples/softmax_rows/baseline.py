"""Baseline for the row softmax examples: torch.softmax over each row (PyTorch's own CUDA kernel)."""
import torch


def softmax(x, ROWS, COLS):
    return torch.softmax(x, dim=1)
