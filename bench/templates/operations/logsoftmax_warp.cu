// Log-softmax over rows (torch.log_softmax(x, dim=1)): a first kernel with a warp a row, the
// reductions by warp shuffles, rows taken in a grid-stride loop over warps.
__global__ void logsoftmax_warp(const float *logits, float *out, int n_rows, int n_cols) {
    int lane = threadIdx.x % 32;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int warps = gridDim.x * blockDim.x / 32;
    for (int r = warp; r < n_rows; r += warps) {
        const float *src = logits + (size_t)r * n_cols;
        float *dst = out + (size_t)r * n_cols;
        float mx = -INFINITY;
        for (int c = lane; c < n_cols; c += 32) mx = fmaxf(mx, src[c]);
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
        float s = 0.0f;
        for (int c = lane; c < n_cols; c += 32) s += __expf(src[c] - mx);
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
        float lse = mx + logf(s);
        for (int c = lane; c < n_cols; c += 32) dst[c] = src[c] - lse;
    }
}
