// Adversarial proposal (on top of tests/data/kernels/vadd_ok.cu): includes a file of the host,
// whose lines nvcc would echo into the compile log that is stored and shown to the model. The
// seed has no such include: the edit is refused before it is built (status edit_failed).
#include "/etc/hostname"
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i];
    }
}
