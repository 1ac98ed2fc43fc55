// Register-blocked single-precision matrix multiply: C = A * B, with A M x K, B K x N and
// C M x N, all row-major. Any M, N and K (partial tiles are guarded).
//
// A block computes a BM x BN tile of C with (BM / TM) * (BN / TN) threads, each thread a
// TM x TN sub-tile held in registers. The block walks K in steps of BK: its threads copy the
// BM x BK slice of A (stored transposed, As[k][m], so that a thread's TM values of one k are
// consecutive) and the BK x BN slice of B into shared memory, each thread loading
// BM * BK / THREADS and BK * BN / THREADS elements (the [tune] restrictions make both whole
// numbers; consecutive threads, consecutive addresses: coalesced), zero where the slice
// passes the edge of the matrix. Then for each k of the slice a thread reads TM values of A
// and TN of B into registers and does TM * TN multiply-adds.
//
// The tunables (the spec's [tune] table) trade reuse (a larger tile reads A and B fewer times;
// a larger TM x TN sub-tile does more multiply-adds per shared-memory read) against
// parallelism, registers and shared memory.
#define BM 64
#define BN 64
#define BK 8
#define TM 4
#define TN 4
#define THREADS ((BM / TM) * (BN / TN))

__global__ void __launch_bounds__(THREADS) sgemm_regblock(const float* A, const float* B, float* C,
                                                          int M, int N, int K) {
    __shared__ float As[BK][BM];     // As[k][m] = A[row0 + m][k0 + k]
    __shared__ float Bs[BK][BN];     // Bs[k][n] = B[k0 + k][col0 + n]

    const int tid = threadIdx.x;
    const int tRow = tid / (BN / TN);      // this thread's sub-tile: rows tRow * TM ..
    const int tCol = tid % (BN / TN);      //                         columns tCol * TN ..
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m) {
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            acc[m][n] = 0.0f;
        }
    }
    float a[TM], b[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
        // the A slice: element i is A[row0 + i / BK][k0 + i % BK]
#pragma unroll
        for (int l = 0; l < BM * BK / THREADS; ++l) {
            int i = tid + l * THREADS;
            int r = row0 + i / BK, k = k0 + i % BK;
            As[i % BK][i / BK] = (r < M && k < K) ? A[(size_t)r * K + k] : 0.0f;
        }
        // the B slice: element i is B[k0 + i / BN][col0 + i % BN]
#pragma unroll
        for (int l = 0; l < BK * BN / THREADS; ++l) {
            int i = tid + l * THREADS;
            int k = k0 + i / BN, c = col0 + i % BN;
            Bs[i / BN][i % BN] = (k < K && c < N) ? B[(size_t)k * N + c] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int m = 0; m < TM; ++m) {
                a[m] = As[k][tRow * TM + m];
            }
#pragma unroll
            for (int n = 0; n < TN; ++n) {
                b[n] = Bs[k][tCol * TN + n];
            }
#pragma unroll
            for (int m = 0; m < TM; ++m) {
#pragma unroll
                for (int n = 0; n < TN; ++n) {
                    acc[m][n] += a[m] * b[n];
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int m = 0; m < TM; ++m) {
        int r = row0 + tRow * TM + m;
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            int c = col0 + tCol * TN + n;
            if (r < M && c < N) {
                C[(size_t)r * N + c] = acc[m][n];
            }
        }
    }
}
