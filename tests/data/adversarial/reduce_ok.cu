// Adversarial control: a correct block reduction. Block j sums x[j * BLOCK * ITEMS ...] into
// out[j] with a shared-memory tree and a __syncthreads() after every step. It must verify
// (ok), which shows that the spec and reduce_ref.py agree with a right answer, so that
// reduce_race.cu fails for its race and nothing else.
#define BLOCK 256
#define ITEMS 4

__global__ void block_sum(const float* x, float* out, int N) {
    __shared__ float partial[BLOCK];
    int t = threadIdx.x;
    long long base = (long long)blockIdx.x * BLOCK * ITEMS;
    float v = 0.0f;
    for (int k = 0; k < ITEMS; ++k) {
        long long i = base + (long long)k * BLOCK + t;
        if (i < N) {
            v += x[i];
        }
    }
    partial[t] = v;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
        __syncthreads();
    }
    if (t == 0) {
        out[blockIdx.x] = partial[0];
    }
}
