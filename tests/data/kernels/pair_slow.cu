// Timing test kernel (the slow one of a pair): out[i] = a[i] + b[i] as pair_fast.cu, after a dependent
// chain of REPEAT FMAs per element whose result is multiplied by zero (IEEE: not foldable without
// fast math), so it runs a couple of hundred times longer than pair_fast.cu and draws the GPU's power
// the way a long compute-bound seed does.
#define BLOCK 256
#define REPEAT 20000

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        float x = a[i];
        float t = x;
#pragma unroll 4
        for (int r = 0; r < REPEAT; ++r) {
            t = fmaf(t, 0.999f, 0.001f * x);
        }
        out[i] = (a[i] + b[i]) + 0.0f * t;
    }
}
