// Adversarial kernel: right on one input only. For N = 1000 it writes outputs memorized from
// the inputs drawn with seed 1234 (vadd_memorized_table.h, made by
// `python3 tests/data/adversarial/memorize.py`), the way a search that always checked the same
// seed could overfit; every other N is computed honestly. Verification draws fresh inputs for
// every case, so the N = 1000 cases must fail with values outside tolerance (wrong_output).
#include "vadd_memorized_table.h"

#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = (N == MEMORIZED_N) ? MEMORIZED_OUT[i] : a[i] + b[i];
    }
}
