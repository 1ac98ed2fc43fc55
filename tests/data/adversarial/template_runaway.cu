// Adversarial kernel: a compile that does not end. R<N> needs R<N + 1>, forever; the spec raises
// nvcc's -ftemplate-depth to 1e9, so instead of stopping at the default depth (and failing
// fast) the front end keeps instantiating: measured with nvcc 13.0 it is still going after
// 60 s, its memory slowly growing (about 600 MB by then). The builder must stop it at its
// timeout and kill nvcc with its children: build_timeout. The kernel around it is a vadd.
#define BLOCK 256

template <int N>
struct Runaway {
    static const int value = Runaway<N + 1>::value + 1;
};

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i] + (float)(Runaway<0>::value - Runaway<0>::value);
    }
}
