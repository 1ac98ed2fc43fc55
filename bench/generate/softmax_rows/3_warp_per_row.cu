// Strategy: one warp per row, WARPS rows per block; each lane keeps an online (running) max and
// sum over its columns in one pass, the lanes merge them with shuffles, a second pass normalises.
#define WARPS 8
// optiml:launch {grid = ["cdiv(ROWS, WARPS)"], block = ["32 * WARPS"], shared_mem = 0}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * expf(m - mn)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mn));
    m = mn;
}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS + warp;
    if (row >= ROWS) return;                 // the whole warp leaves together
    const float* xr = x + (size_t)row * COLS;
    float* yr = y + (size_t)row * COLS;
    float m = -INFINITY, s = 0.0f;
    for (int c = lane; c < COLS; c += 32) {
        float v = xr[c];
        if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
        else s += expf(v - m);
    }
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    float inv = 1.0f / s;
    for (int c = lane; c < COLS; c += 32) yr[c] = expf(xr[c] - m) * inv;
}
