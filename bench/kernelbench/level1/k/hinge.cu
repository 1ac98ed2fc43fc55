// 100_HingeLoss: mean(clamp(1 - pred * tgt, min=0)), pred is batch x D (D = 32768) and tgt (batch,) broadcast along
// the last dimension (tgt[j] for column j); an atomicAdd per element.
__global__ void hinge_kernel(const float* pred, const float* tgt, float* out, int batch_size, int D) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = batch_size * D;
    if (idx < total) {
        float v = 1.0f - pred[idx] * tgt[idx % D];
        atomicAdd(out, fmaxf(v, 0.0f) / total);
    }
}
