// out[i] = a[i] + b[i] for i < N, correct; its spec (vadd_overcounted.toml) claims four times the
// bytes it moves, so its time is past the speed of light: an adversarial test kernel (see cases.py).
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i];
    }
}
