// 36_RMSNorm_, style B: a 2-D grid (blockIdx.y the batch, x over the spatial positions), full index expressions.
__global__ void rmsnorm_kernel(const float* x, float* out, int batch_size, int features, int dim1, int dim2, float eps) {
    int n = blockIdx.y;
    int hw = blockIdx.x * blockDim.x + threadIdx.x;
    int HW = dim1 * dim2;
    if (hw < HW) {
        float sum = 0.0f;
        for (int c = 0; c < features; c++) {
            float v = x[(n * features + c) * HW + hw];
            sum += v * v;
        }
        float rms = sqrtf(sum / features + eps);
        for (int c = 0; c < features; c++) {
            out[(n * features + c) * HW + hw] = x[(n * features + c) * HW + hw] / rms;
        }
    }
}
