// Tiled matrix transpose: out[j][i] = in[i][j] for a ROWS x COLS float32 matrix (row-major),
// giving a COLS x ROWS matrix. Any ROWS and COLS.
//
// A block moves one TILE x TILE tile through shared memory: it reads the tile row by row from
// `in` (coalesced: consecutive threads, consecutive columns), then writes it row by row to `out`
// (coalesced again), reading shared memory down the columns. The block is TILE x
// (TILE / ROWS_PER_THREAD) threads: each thread moves ROWS_PER_THREAD elements, TILE /
// ROWS_PER_THREAD rows apart. PAD extra floats per shared-memory row shift each row by one bank,
// so the column-wise reads are free of bank conflicts (PAD = 0: a TILE-way conflict when TILE
// is a multiple of 32).
//
// The tunables trade the tile's size, the work per thread and the padding; the spec's [tune]
// table lists them.
#define TILE 32
#define ROWS_PER_THREAD 4
#define PAD 1
#define BLOCK_ROWS (TILE / ROWS_PER_THREAD)

__global__ void transpose_tiled(const float* in, float* out, int ROWS, int COLS) {
    __shared__ float tile[TILE][TILE + PAD];
    int tx = threadIdx.x, ty = threadIdx.y;

    int col = blockIdx.x * TILE + tx;            // column of in
    int row0 = blockIdx.y * TILE + ty;           // first row of in this thread reads
#pragma unroll
    for (int k = 0; k < TILE; k += BLOCK_ROWS) {
        int row = row0 + k;
        if (row < ROWS && col < COLS) {
            tile[ty + k][tx] = in[(size_t)row * COLS + col];
        }
    }
    __syncthreads();

    int ocol = blockIdx.y * TILE + tx;           // column of out = row of in
    int orow0 = blockIdx.x * TILE + ty;          // row of out = column of in
#pragma unroll
    for (int k = 0; k < TILE; k += BLOCK_ROWS) {
        int orow = orow0 + k;
        if (orow < COLS && ocol < ROWS) {
            out[(size_t)orow * ROWS + ocol] = tile[tx][ty + k];
        }
    }
}
