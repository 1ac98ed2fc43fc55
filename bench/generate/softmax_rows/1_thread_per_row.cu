// Strategy: one thread per row (deliberately simple): each thread walks its whole row three
// times (max, sum of exponentials, normalise); neighbouring threads read addresses a row apart.
#define BLOCK 128
// optiml:launch {grid = ["cdiv(ROWS, BLOCK)"], block = ["BLOCK"], shared_mem = 0}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS) {
    int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row >= ROWS) return;
    const float* xr = x + (size_t)row * COLS;
    float* yr = y + (size_t)row * COLS;
    float m = -INFINITY;
    for (int c = 0; c < COLS; ++c) m = fmaxf(m, xr[c]);
    float s = 0.0f;
    for (int c = 0; c < COLS; ++c) s += expf(xr[c] - m);
    float inv = 1.0f / s;
    for (int c = 0; c < COLS; ++c) yr[c] = expf(xr[c] - m) * inv;
}
