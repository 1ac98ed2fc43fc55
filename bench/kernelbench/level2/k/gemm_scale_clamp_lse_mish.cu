// 22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish: a block a row; the row's values (scaled, doubled,
// clamped) kept in dynamic shared memory, their max then the sum of exponentials by trees, then x * mish(x).
#define THREADS 256
__global__ void gemm_scale_clamp_lse_mish(const float* A, const float* W, const float* bias, float* out, int M, int K, int N) {
    extern __shared__ float vals[];                 // N floats
    __shared__ float red[THREADS];
    int m = blockIdx.x, t = threadIdx.x;
    float mx = -INFINITY;
    for (int n = t; n < N; n += THREADS) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[m * K + k] * W[n * K + k];
        float v = (acc + bias[n]) * 2.0f;
        v = v + v;
        v = fminf(fmaxf(v, -10.0f), 10.0f);
        vals[n] = v;
        mx = fmaxf(mx, v);
    }
    red[t] = mx;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] = fmaxf(red[t], red[t + h]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float s = 0.0f;
    for (int n = t; n < N; n += THREADS) s += expf(vals[n] - mx);
    red[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    if (t == 0) {
        float l = mx + logf(red[0]);
        float sp = l > 20.0f ? l : log1pf(expf(l));
        out[m] = l * (l * tanhf(sp));
    }
}
