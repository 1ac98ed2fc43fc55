// Adversarial kernel: right outputs, but it reads out[i] before writing it (a "keep the old
// value if ..." check whose condition never holds). Nothing wrote out before the launch; the
// value read never changes the result, so verification passes; initcheck sees the read of
// uninitialized global memory (status unsafe).
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        float old = out[i];             // never written before this launch
        out[i] = a[i] + b[i];
        if (old == 1.0e30f && a[i] > 1.0e30f) out[i] = old;   // never true for these inputs
    }
}
