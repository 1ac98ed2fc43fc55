// 99_Matmul_GELU_Softmax, style A: a block a row; GELU of the Linear's outputs written to the output row,
// its max and sum of exponentials by shared-memory trees, then the row divided in place.
#define THREADS 256
__global__ void matmul_gelu_softmax(const float* in, const float* w, const float* b, float* y, int rows, int inner, int cols) {
    __shared__ float red[THREADS];
    int r = blockIdx.x, t = threadIdx.x;
    float* yr = y + r * cols;
    float mx = -INFINITY;
    for (int c = t; c < cols; c += THREADS) {
        float acc = b[c];
        for (int k = 0; k < inner; ++k) acc += in[r * inner + k] * w[c * inner + k];
        float g = 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
        yr[c] = g;
        mx = fmaxf(mx, g);
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
    for (int c = t; c < cols; c += THREADS) {
        float e = expf(yr[c] - mx);
        yr[c] = e;
        s += e;
    }
    red[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int c = t; c < cols; c += THREADS) yr[c] *= inv;
}
