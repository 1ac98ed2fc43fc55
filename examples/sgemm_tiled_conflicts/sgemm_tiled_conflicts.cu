// Shared-memory tiled single-precision matrix multiply: C = A * B.
// A is M x K, B is K x N, C is M x N, all row-major. Any M, N, K (partial tiles are
// zero-filled on load and the store is guarded).
//
// Each TILE x TILE thread block computes a TILE x TILE tile of C, one element per thread,
// walking K in steps of TILE: it stages a tile of A and a tile of B in shared memory and
// accumulates from there.
//
// Deliberately slow: the B tile is stored TRANSPOSED (Bs[tx][ty] holds B[k0 + ty][col]) and
// read in the inner loop as Bs[tx][k]. The 32 threads of a warp differ in tx, so they touch
// addresses TILE floats apart: all in the same shared-memory bank, a 32-way bank conflict on
// every inner-loop read (and on every store into Bs). Padding the array by one column,
//     __shared__ float Bs[TILE][TILE + 1];
// puts consecutive tx in consecutive banks and removes the conflicts (about 85 ms -> 15 ms at
// 4096^3 on an H100); all indexing below stays valid with the padding.
#define TILE 32

__global__ void sgemm_tiled_conflicts(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int ak = k0 + tx;   // column of A loaded by this thread
        int bk = k0 + ty;   // row of B loaded by this thread
        As[ty][tx] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[tx][ty] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;   // transposed store
        __syncthreads();

        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[tx][k];   // Bs[tx][k] == B[k0 + k][col]
        }
        __syncthreads();
    }

    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}
