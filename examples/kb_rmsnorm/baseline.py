"""Baseline for kb_rmsnorm: torch.nn.functional.rms_norm (PyTorch's fused RMSNorm) with the same
weight and eps."""
import torch


def rms_norm(x, weight, batch_size, features, eps):
    return torch.nn.functional.rms_norm(x, (features,), weight, eps)
