// Row-wise softmax of a ROWS x COLS float32 matrix (row-major), numerically stable:
//     y[r][c] = exp(x[r][c] - max_c x[r][.]) / sum_c exp(x[r][c] - max_c x[r][.])
// Any ROWS and COLS.
//
// One block of BLOCK threads per row (BLOCK a multiple of 32). The row is read in chunks of
// BLOCK * ITEMS elements: each thread loads ITEMS of them into registers (element
// c0 + it * BLOCK + tid: coalesced) and folds them into its running maximum and its sum of
// exponentials (an online softmax: the sum is rescaled whenever the maximum grows). Warp
// shuffles, then one float pair per warp in shared memory, combine the threads' (max, sum).
// The second pass writes exp(x - max) / sum: from the registers when the whole row fitted in
// one chunk (COLS <= BLOCK * ITEMS), else reading the row again.
//
// The tunables (the spec's [tune] table) trade threads per row against elements in flight and
// held per thread.
#define BLOCK 256
#define ITEMS 4
#define WARPS (BLOCK / 32)

// (m, s) and (m2, s2) are a maximum and a sum of exp(x - maximum) over two sets: merged in place
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    if (mm == -INFINITY) {
        return;                       // both sets empty
    }
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__global__ void __launch_bounds__(BLOCK) softmax_tuned(const float* x, float* y, int ROWS, int COLS) {
    __shared__ float red_m[WARPS], red_s[WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const float* xr = x + (size_t)blockIdx.x * COLS;
    float* yr = y + (size_t)blockIdx.x * COLS;

    float v[ITEMS];
    float m = -INFINITY, s = 0.0f;
    for (int c0 = 0; c0 < COLS; c0 += BLOCK * ITEMS) {
        float cm = -INFINITY;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            int c = c0 + it * BLOCK + tid;
            v[it] = c < COLS ? xr[c] : -INFINITY;
            cm = fmaxf(cm, v[it]);
        }
        if (cm == -INFINITY) {
            continue;                     // this thread has nothing in this chunk
        }
        float cs = 0.0f;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            cs += expf(v[it] - cm);       // exp(-inf) = 0 past the end of the row
        }
        merge(m, s, cm, cs);
    }

    // the block's (max, sum): within each warp, then across the warps
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    if (lane == 0) {
        red_m[warp] = m;
        red_s[warp] = s;
    }
    __syncthreads();
    m = -INFINITY;
    s = 0.0f;
    for (int w = 0; w < WARPS; ++w) {
        merge(m, s, red_m[w], red_s[w]);
    }
    const float inv = 1.0f / s;

    if (COLS <= BLOCK * ITEMS) {          // the row is still in registers
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            int c = it * BLOCK + tid;
            if (c < COLS) {
                yr[c] = expf(v[it] - m) * inv;
            }
        }
    } else {
        for (int c = tid; c < COLS; c += BLOCK) {
            yr[c] = expf(xr[c] - m) * inv;
        }
    }
}
