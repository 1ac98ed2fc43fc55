// 95_Matmul_Add_Swish_Tanh_GELU_Hardtanh: a thread an output, the chain on a local with conditionals.
__global__ void matmul_add_act_chain(const float* in, const float* add_value, const float* w, const float* b, float* out,
                                     int rows, int inner, int cols) {
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows || c >= cols) return;
    float acc = 0.0f;
    for (int k = 0; k < inner; ++k) acc += in[r * inner + k] * w[c * inner + k];
    float v = acc + b[c] + add_value[c];
    v = v / (1.0f + expf(-v));
    v = tanhf(v);
    v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    if (v > 1.0f) v = 1.0f;
    else if (v < -1.0f) v = -1.0f;
    out[r * cols + c] = v;
}
