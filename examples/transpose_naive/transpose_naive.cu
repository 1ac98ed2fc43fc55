// Naive matrix transpose: out[j][i] = in[i][j] for a ROWS x COLS float32 matrix (row-major),
// giving a COLS x ROWS matrix. One element per thread, any ROWS and COLS.
//
// Threads are laid out over the INPUT: threadIdx.x walks columns j, threadIdx.y walks rows i.
// Reads in[i * COLS + j] are coalesced (consecutive threads, consecutive addresses), but the
// writes out[j * ROWS + i] from consecutive threads are ROWS floats apart, so every store of
// a warp touches a separate 32-byte sector: uncoalesced writes waste most of the DRAM
// bandwidth. No shared memory is used.
//
// Expected fix: stage a tile in shared memory (e.g. 32 x 32, padded to [32][33] to avoid bank
// conflicts) so that both the global reads and the global writes are coalesced; then have
// each thread move several elements.
#define BLOCK_X 16
#define BLOCK_Y 16

__global__ void transpose_naive(const float* in, float* out, int ROWS, int COLS) {
    int j = blockIdx.x * BLOCK_X + threadIdx.x;   // column of in, row of out
    int i = blockIdx.y * BLOCK_Y + threadIdx.y;   // row of in, column of out
    if (i < ROWS && j < COLS) {
        out[(size_t)j * ROWS + i] = in[(size_t)i * COLS + j];
    }
}
