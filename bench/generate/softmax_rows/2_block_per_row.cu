// Strategy: one block per row; the threads stride over the row and combine their partial max,
// then their partial sum, with a shared-memory tree reduction.
#define BLOCK 256
// optiml:launch {grid = ["ROWS"], block = ["BLOCK"], shared_mem = "BLOCK * 4"}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int ROWS, int COLS) {
    extern __shared__ float red[];
    int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;
    float m = -INFINITY;
    for (int c = tid; c < COLS; c += BLOCK) m = fmaxf(m, xr[c]);
    red[tid] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = tid; c < COLS; c += BLOCK) sum += expf(xr[c] - m);
    red[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int c = tid; c < COLS; c += BLOCK) yr[c] = expf(xr[c] - m) * inv;
}
