// 99_Matmul_GELU_Softmax, style B: a warp a row (32 threads a block), max and sum by shuffles.
__global__ void matmul_gelu_softmax_warp(const float* A, const float* W, const float* bias, float* C, int M, int K, int N) {
    int m = blockIdx.x, lane = threadIdx.x;
    float mx = -INFINITY;
    for (int n = lane; n < N; n += 32) {
        float acc = bias[n];
        for (int k = 0; k < K; ++k) acc += A[m * K + k] * W[n * K + k];
        float g = 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
        C[m * N + n] = g;
        mx = fmaxf(mx, g);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    float s = 0.0f;
    for (int n = lane; n < N; n += 32) s += expf(C[m * N + n] - mx);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    for (int n = lane; n < N; n += 32) C[m * N + n] = expf(C[m * N + n] - mx) / s;
}
