// A hand-written variant of sgemm_naive for `optiml optimize --seed-kernel`: 32x32 tiles of A
// and B in shared memory (padded), each thread computes four outputs of one column, so the
// block is 32 x 8 and the launch differs from the seed's: the line below says how to launch it.
// optiml:launch {grid = ["cdiv(N, TS)", "cdiv(M, TS)"], block = ["TS", "TS / ROWS"], shared_mem = 0}
#define TS 32
#define ROWS 4

__global__ void sgemm_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TS][TS + 1];
    __shared__ float Bs[TS][TS + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TS + tx;
    const int row0 = blockIdx.y * TS;
    float acc[ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < K; k0 += TS) {
        for (int i = 0; i < ROWS; ++i) {
            const int r = ty + i * (TS / ROWS);
            const int arow = row0 + r, acol = k0 + tx, brow = k0 + r;
            As[r][tx] = (arow < M && acol < K) ? A[arow * K + acol] : 0.0f;
            Bs[r][tx] = (brow < K && col < N) ? B[brow * N + col] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < TS; ++k) {
            const float b = Bs[k][tx];
            for (int i = 0; i < ROWS; ++i) {
                acc[i] += As[ty + i * (TS / ROWS)][k] * b;
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < ROWS; ++i) {
        const int r = row0 + ty + i * (TS / ROWS);
        if (r < M && col < N) {
            C[r * N + col] = acc[i];
        }
    }
}
