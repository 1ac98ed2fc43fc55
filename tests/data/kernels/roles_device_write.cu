// The entry writes its output only through a __device__ helper, and reads its input through
// another, reached by pointer arithmetic: `out` is an output, `in` an input, though nothing is const.
__device__ float load(float *p, int i) { return p[i]; }
__device__ void store(float *dst, int i, float v) { *(dst + i) = v; }

__global__ void scale(float *in, float *out, int n) {
  int i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) store(out, i, 2.0f * load(in, i));
}
