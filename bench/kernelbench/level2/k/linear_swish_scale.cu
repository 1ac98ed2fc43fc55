// 59_Matmul_Swish_Scaling: a thread an output, swish then the scale through a local.
__global__ void linear_swish_scale(const float* in, const float* w, const float* b, float* y, int rows, int inner, int cols) {
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && c < cols) {
        float acc = 0.0f;
        for (int k = 0; k < inner; k++) acc += in[r * inner + k] * w[c * inner + k];
        float v = acc + b[c];
        y[r * cols + c] = v / (1.0f + expf(-v)) * 2.0f;
    }
}
