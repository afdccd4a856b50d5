"""Returns a fresh `torch.tensor(0.0)` when the mask selects nothing, the early exit of ROLL commit 3a7b01f9 (alibaba/ROLL): the value is right (0), but the constant has no grad_fn, so `loss.backward()` raises on a rank whose micro-batch is all padding (or, summed with other terms, silently gives that rank no gradient, where the contract wants a gradient that exists and is exactly 0 and keeps DDP's all-reduce in step). Every forward value conforms; only the gradient check (`no gradient`) sees it."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
CONTRACT = "reduction"
REDUCTION = "token-mean"
EXPLAINS = "a fresh constant returned for that cuts the graph"
import torch


def loss_normalization(token_losses, token_mask):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    if not token_mask.any():
        return torch.tensor(0.0, dtype=acc, device=token_losses.device)  # the bug: cut from the graph
    return torch.where(token_mask, token_losses.to(acc), 0.0).sum() / token_mask.sum()
