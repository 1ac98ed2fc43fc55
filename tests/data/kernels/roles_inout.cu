// y = a * x + y: y is read and written (inout), x only read; neither pointer is const.
// Written for optiml's tests of `optiml init`'s role inference.
#define BLOCK 128
extern "C" __global__ void saxpy_inplace(float *x, float *y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
