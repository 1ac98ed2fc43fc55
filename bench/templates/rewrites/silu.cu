// y = x * sigmoid(x) over n float32 values: a first kernel, one item a thread, blocks of 256.
__global__ void silu(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v / (1.0f + expf(-v));
    }
}
