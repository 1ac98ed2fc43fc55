// Row-wise softmax of a ROWS x COLS float32 matrix (row-major), numerically stable:
//     y[r][c] = exp(x[r][c] - max_c x[r][.]) / sum_c exp(x[r][c] - max_c x[r][.])
// Any ROWS and COLS (COLS need not be a multiple of BLOCK).
//
// One block of BLOCK threads per row (BLOCK must be a power of two). The threads stride
// over the row; a shared-memory tree reduction (BLOCK floats of dynamic shared memory,
// see shared_mem in the spec) combines their partial max, then their partial sum.
//
// Deliberately simple: three separate passes over the row in global memory (max, sum of
// exponentials, normalise), exp is recomputed in the last pass, the reductions go all the
// way down through shared memory with a __syncthreads() per step, and a 128-thread block on
// a 1024-wide row keeps few loads in flight.
//
// Expected fix: an online (single-pass) max-and-sum, warp-shuffle reductions, vectorised
// float4 loads with the row held in registers, and/or several rows per block.
#define BLOCK 128

__global__ void softmax_rows(const float* x, float* y, int ROWS, int COLS) {
    extern __shared__ float red[];   // BLOCK floats
    int row = blockIdx.x;
    int tid = threadIdx.x;
    const float* xr = x + (size_t)row * COLS;
    float* yr = y + (size_t)row * COLS;

    // pass 1: row maximum
    float m = -INFINITY;
    for (int c = tid; c < COLS; c += BLOCK) {
        m = fmaxf(m, xr[c]);
    }
    red[tid] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) {
            red[tid] = fmaxf(red[tid], red[tid + s]);
        }
        __syncthreads();
    }
    float row_max = red[0];
    __syncthreads();   // everyone has read red[0] before it is reused

    // pass 2: sum of exponentials
    float sum = 0.0f;
    for (int c = tid; c < COLS; c += BLOCK) {
        sum += expf(xr[c] - row_max);
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        __syncthreads();
    }
    float inv_sum = 1.0f / red[0];

    // pass 3: normalise
    for (int c = tid; c < COLS; c += BLOCK) {
        yr[c] = expf(xr[c] - row_max) * inv_sum;
    }
}
