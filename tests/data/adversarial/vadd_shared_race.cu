// Adversarial kernel: right outputs, but every thread also reads another warp's slot of a shared
// array with no barrier between the writes and the read (a hazard racecheck reports). The value
// read is clamped to nothing (fminf(|x|, 0) is 0 for every finite x), so the result is right
// whatever the race gives, and verification passes (status unsafe).
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    __shared__ float s[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    s[threadIdx.x] = i < N ? a[i] : 0.0f;
    float other = s[(threadIdx.x + 64) % BLOCK];      // another warp's slot, no __syncthreads()
    if (i < N) {
        out[i] = a[i] + b[i] + fminf(fabsf(other), 0.0f);
    }
}
