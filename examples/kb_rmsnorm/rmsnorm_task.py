"""A KernelBench-format task written for optiml's examples, a fused operation: RMS normalisation
of each row of a (batch_size, features) float32 tensor followed by a learned per-feature scale
(the Model's `weight`, a parameter the kernel receives as an input)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x / sqrt(mean(x**2, dim=1) + eps) * weight."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(features) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 16384
features = 4096


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
