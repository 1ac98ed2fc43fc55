// A 256-bin histogram of n bytes: a first kernel. One byte a thread, counted with a global atomic
// into bins: every thread of the GPU contends for the same 256 counters.
__global__ void byte_hist(const unsigned char *data, unsigned int *bins, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[data[i]], 1);
}
