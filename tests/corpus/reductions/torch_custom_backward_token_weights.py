"""A per-sequence loss (seq-mean-token-mean, rows=all) written as a `torch.autograd.Function` with a backward of its own, as fused kernels write theirs (the Triton built-in's backward writes m_it w_i), whose backward gives every selected token c / N, token-mean's weight, instead of c / (B n_i): the loss is right, the update is another mode's. No public report names this one line; it is the class a hand-written backward adds, which a test of the loss alone never sees: Liger-Kernel's fused GRPO loss, whose gradients differed from TRL's plain path in its normalizers (linkedin/Liger-Kernel#1082), is where such code lives. Every forward value conforms; the gradient check sees it and names the mode whose gradient it is."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-mean"
EXPLAINS = "gradient of the exact token-mean, where seq-mean-token-mean is declared"
import torch


class _PerSequenceMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token_losses, token_mask):
        acc = torch.promote_types(token_losses.dtype, torch.float32)
        counts = token_mask.sum(-1)
        sums = torch.where(token_mask, token_losses.to(acc), 0.0).sum(-1)
        ctx.save_for_backward(token_mask)
        ctx.input_dtype = token_losses.dtype
        return (sums / counts.clamp(min=1)).sum() / max(token_mask.shape[0], 1)

    @staticmethod
    def backward(ctx, cotangent):
        (token_mask,) = ctx.saved_tensors
        weight = cotangent / token_mask.sum().clamp(min=1)  # the bug: token-mean's 1/N, not 1/(B n_i)
        return torch.where(token_mask, weight, 0.0).to(ctx.input_dtype), None


def loss_normalization(token_losses, token_mask):
    return _PerSequenceMean.apply(token_losses, token_mask)
