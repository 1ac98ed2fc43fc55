"""Python reference for the vadd_*.cu test kernels: the true function, so every variant is
judged against it rather than against itself."""


def vadd(a, b, N):
    return a + b
