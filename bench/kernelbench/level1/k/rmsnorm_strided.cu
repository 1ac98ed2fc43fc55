// 36_RMSNorm_ (x is batch x features x dim1 x dim2, normalised over features): one thread per
// (batch, spatial) position, two loops over the features at stride dim1 * dim2.
__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y,
                                int batch_size, int features, int dim1, int dim2, float eps) {
    int spatial = dim1 * dim2;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch_size * spatial) return;
    int b = idx / spatial;
    int s = idx % spatial;
    const float* xp = x + (size_t)b * features * spatial + s;
    float* yp = y + (size_t)b * features * spatial + s;
    float sumsq = 0.0f;
    for (int f = 0; f < features; ++f) {
        float v = xp[(size_t)f * spatial];
        sumsq += v * v;
    }
    float inv_rms = rsqrtf(sumsq / features + eps);
    for (int f = 0; f < features; ++f) {
        yp[(size_t)f * spatial] = xp[(size_t)f * spatial] * inv_rms;
    }
}
