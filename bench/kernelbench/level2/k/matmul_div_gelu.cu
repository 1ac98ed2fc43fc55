// 86_Matmul_Divide_GELU, style A: a thread an output, GELU (erf) through a __device__ helper.
__device__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

__global__ void matmul_div_gelu(const float* x, const float* weight, const float* bias, float* out,
                                int batch_size, int input_size, int output_size) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size && col < output_size) {
        float acc = 0.0f;
        for (int k = 0; k < input_size; ++k) acc += x[row * input_size + k] * weight[col * input_size + k];
        out[row * output_size + col] = gelu_erf((acc + bias[col]) / 10.0f);
    }
}
