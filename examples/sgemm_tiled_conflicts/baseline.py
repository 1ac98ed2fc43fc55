"""Baseline for the SGEMM examples: cuBLAS through torch.matmul, in full FP32 (TF32 off, as the
kernel computes), writing C in place. optiml verifies it against the reference and times it as
it times a kernel (spec: [baseline])."""
import torch


def matmul(A, B, C, M, N, K):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.matmul(A, B, out=C)
