// 38_L1Norm_: x / mean(|x|) over each row; one block per row, shared tree.
#define BLOCK_SIZE 512
__global__ void l1_norm_kernel(const float* x, float* y, int batch_size, int dim) {
    __shared__ float partial[BLOCK_SIZE];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int j = tid; j < dim; j += BLOCK_SIZE) {
        sum += fabsf(x[row * dim + j]);
    }
    partial[tid] = sum;
    __syncthreads();
    for (int stride = BLOCK_SIZE / 2; stride > 0; stride /= 2) {
        if (tid < stride) {
            partial[tid] += partial[tid + stride];
        }
        __syncthreads();
    }
    float mean = partial[0] / dim;
    for (int j = tid; j < dim; j += BLOCK_SIZE) {
        y[row * dim + j] = x[row * dim + j] / mean;
    }
}
