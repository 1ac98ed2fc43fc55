import torch
def scalar_mul(A, s, **_):
    return {"C": A * s}
def hinge(pred, tgt, **_):
    return {"out": torch.mean(torch.clamp(1 - pred * tgt, min=0)).reshape(1)}
