// Row softmax over long rows, y = softmax(x, dim=1) for x of rows x cols float32: a first kernel
// written the way people write one before optimizing. One block of 1024 threads per row, three
// passes over the row (max, sum of exponentials, write), each reduced through shared memory.
__global__ void softmax_long(const float *x, float *y, int rows, int cols) {
    __shared__ float sh[1024];
    const float *xr = x + (size_t)blockIdx.x * cols;
    float *yr = y + (size_t)blockIdx.x * cols;
    int t = threadIdx.x;

    float m = -INFINITY;
    for (int c = t; c < cols; c += 1024) m = fmaxf(m, xr[c]);
    sh[t] = m;
    __syncthreads();
    for (int s = 512; s > 0; s >>= 1) {
        if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();

    float sum = 0.0f;
    for (int c = t; c < cols; c += 1024) sum += expf(xr[c] - m);
    sh[t] = sum;
    __syncthreads();
    for (int s = 512; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    float inv = 1.0f / sh[0];

    for (int c = t; c < cols; c += 1024) yr[c] = expf(xr[c] - m) * inv;
}
