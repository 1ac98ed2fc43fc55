// Adversarial kernel: a correct vector add that stages its sums in dynamic shared memory, with
// a spec that asks for 1 MiB of it per block (shared_mem = 1048576; an H100 or H200 block may
// have at most 227 KiB). Raising the function's dynamic shared memory limit that far, or the
// launch itself, is refused: launch_error. (tests/gpu/test_gpu_eval.py covers 400000 bytes asked
// for through an // optiml:launch comment; this one asks through the spec.)
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    extern __shared__ float staged[];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        staged[threadIdx.x] = a[i] + b[i];
        out[i] = staged[threadIdx.x];
    }
}
