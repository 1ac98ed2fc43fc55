// One Jacobi step of a 5-point stencil on an H x W float32 grid (row-major):
//     out[i][j] = 0.5 * in[i][j] + 0.125 * (in[i-1][j] + in[i+1][j] + in[i][j-1] + in[i][j+1])
// with the neighbours clamped at the edges (a cell on the border uses itself in place of the
// missing neighbour). Any H and W.
//
// A block of BLOCK_X x BLOCK_Y threads covers BLOCK_X columns and BLOCK_Y * ROWS_PER_THREAD
// rows: each thread walks ROWS_PER_THREAD consecutive rows of one column, keeping the cells
// above, at and below its row in registers, so each row's centre value is read once and reused
// as the next row's "up" and the row after's "down". Left and right neighbours come through
// the L1 cache (the neighbouring threads read them as their centre).
//
// Memory-bound: ideally 8 bytes move per cell (one read, one write). The tunables trade
// coalescing (BLOCK_X: a warp reads BLOCK_X consecutive floats of a row), occupancy and
// parallelism (BLOCK_X * BLOCK_Y threads a block) and reuse along the column (ROWS_PER_THREAD).
#define BLOCK_X 32
#define BLOCK_Y 8
#define ROWS_PER_THREAD 1

__global__ void stencil2d(const float* in, float* out, int H, int W) {
    int j = blockIdx.x * BLOCK_X + threadIdx.x;
    int i0 = (blockIdx.y * BLOCK_Y + threadIdx.y) * ROWS_PER_THREAD;
    if (j >= W || i0 >= H) {
        return;
    }
    int jl = j > 0 ? j - 1 : j;          // clamped neighbours
    int jr = j < W - 1 ? j + 1 : j;
    float up = in[(size_t)(i0 > 0 ? i0 - 1 : i0) * W + j];
    float mid = in[(size_t)i0 * W + j];
#pragma unroll
    for (int r = 0; r < ROWS_PER_THREAD; ++r) {
        int i = i0 + r;
        if (i >= H) {
            break;
        }
        float down = in[(size_t)(i < H - 1 ? i + 1 : i) * W + j];
        const float* row = in + (size_t)i * W;
        out[(size_t)i * W + j] = 0.5f * mid + 0.125f * ((up + down) + (row[jl] + row[jr]));
        up = mid;
        mid = down;
    }
}
