// Adversarial kernel: a correct vector add whose first LOUD threads each print LINES lines,
// megabytes per launch (the device printf buffer, 1 MiB by default, is dumped into the
// child's stdout at every synchronisation). It verifies (ok); what is tested is that the
// parent neither hangs nor holds all of it: it keeps a tail of the child's output
// (verify.harness.LOG_TAIL bytes) and says how much it left out.
#include <cstdio>

#define BLOCK 256
#define LOUD 4096
#define LINES 64

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i];
        if (i < LOUD) {
            for (int k = 0; k < LINES; ++k) {
                printf("vadd_printf_flood: thread %d line %d of %d: a = %f b = %f\n", i, k, LINES, a[i], b[i]);
            }
        }
    }
}
