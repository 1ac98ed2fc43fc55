// 99_TripletMarginLoss (p = 2, eps 1e-6, mean): one block per row for the two distances, then one atomic a row.
#define BLOCK 256
__global__ void triplet_kernel(const float* anchor, const float* positive, const float* negative, float* out,
                               int batch_size, int dim, float margin) {
    __shared__ float sp[BLOCK];
    __shared__ float sn[BLOCK];
    int row = blockIdx.x, tid = threadIdx.x;
    float dp = 0.0f, dn = 0.0f;
    for (int j = tid; j < dim; j += BLOCK) {
        float a = anchor[(size_t)row * dim + j];
        float p = a - positive[(size_t)row * dim + j] + 1e-6f;
        float q = a - negative[(size_t)row * dim + j] + 1e-6f;
        dp += p * p;
        dn += q * q;
    }
    sp[tid] = dp;
    sn[tid] = dn;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) { sp[tid] += sp[tid + s]; sn[tid] += sn[tid + s]; }
        __syncthreads();
    }
    if (tid == 0) {
        float l = fmaxf(sqrtf(sp[0]) - sqrtf(sn[0]) + margin, 0.0f);
        atomicAdd(out, l / batch_size);
    }
}
