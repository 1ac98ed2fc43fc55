// A histogram: `counts` is only touched by atomicAdd (a write that also reads: inout), `keys` is read.
__global__ void histogram(int *keys, unsigned int *counts, int n, int bins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int k = keys[i] % bins;
    atomicAdd(&counts[k], 1u);
  }
}
