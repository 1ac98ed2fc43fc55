// 56_Matmul_Sigmoid_Sum: a block a row, a shared-memory tree over the row's sigmoids.
#define THREADS 256
__global__ void matmul_sigmoid_sum(const float* in, const float* w, const float* b, float* out, int rows, int inner, int cols) {
    __shared__ float buf[THREADS];
    int r = blockIdx.x, t = threadIdx.x;
    float s = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) {
        float acc = b[c];
        for (int k = 0; k < inner; ++k) acc += in[r * inner + k] * w[c * inner + k];
        s += 1.0f / (1.0f + expf(-acc));
    }
    buf[t] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (t < h) buf[t] += buf[t + h];
        __syncthreads();
    }
    if (t == 0) out[r] = buf[0];
}
