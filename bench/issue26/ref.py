"""Reference (float64, torch on the harness's GPU buffers) and the cuBLAS baseline (TF32 off) for
issue 26's nn.Linear + bias + ReLU."""
import torch

torch.backends.cuda.matmul.allow_tf32 = False


def linear_relu(x, w, bias, y, M, N, K):
    return torch.relu(x.double() @ w.double().T + bias.double()).float()


def linear_relu_cublas(x, w, bias, y, M, N, K):
    return torch.relu(torch.nn.functional.linear(x, w, bias))


def hgemm(A, B, C, M, N, K):
    return (A.float() @ B.float()).half()


def hgemm_cublas(A, B, C, M, N, K):
    return A @ B


def hgemm_bt(A, B, C, M, N, K):          # B stored N x K (nn.Linear's weight)
    return (A.float() @ B.float().T).half()


def hgemm_at(A, B, C, M, N, K):          # A stored K x M
    return (A.float().T @ B.float()).half()
