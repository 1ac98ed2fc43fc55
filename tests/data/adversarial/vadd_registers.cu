// Adversarial kernel: a launch that asks for more registers than a block may have. Blocks of
// 1024 threads, no __launch_bounds__, -maxrregcount=255 in the spec, and LIVE values that are
// all alive at once (the second pass needs every r[k] after s, which depends on all of them):
// ptxas gives it about 207 registers, and 207 x 1024 is far above the 65536 registers of a
// block, so cuLaunchKernel would refuse it ("too many resources requested for launch"); optiml
// says so from ptxas's count before the GPU: launch_config_error. The arithmetic is bounded and 0 * t is 0, so the kernel is correct where it
// can run (with fewer threads per block).
#define BLOCK 1024
#define LIVE 200

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i >= N) {
        return;
    }
    float x = a[i];
    float r[LIVE];
    r[0] = x;
#pragma unroll
    for (int k = 1; k < LIVE; ++k) {
        r[k] = fmaf(r[k - 1], 0.5f, x * (k * 1e-3f));
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < LIVE; ++k) {
        s += r[k];
    }
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < LIVE; ++k) {
        t = fmaf(r[k], s, t);
    }
    out[i] = a[i] + b[i] + 0.0f * t;
}
