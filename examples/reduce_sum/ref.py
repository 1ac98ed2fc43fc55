"""Python reference for reduce_sum.cu: the kernel adds the sum of x to out[0], in float64 here."""
import numpy as np


def reduce_sum(x, out, N):
    total = np.asarray(out, dtype=np.float64)[0] + np.sum(np.asarray(x, dtype=np.float64)[:N])
    return np.array([total], dtype=np.float32)
