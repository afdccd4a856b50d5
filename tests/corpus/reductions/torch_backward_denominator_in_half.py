"""A fixed-length loss (Dr. GRPO: seq-mean-token-sum-norm, rows=all, L_max = 1024) written as a `torch.autograd.Function` whose backward builds its denominator B * L_max as a tensor of the input dtype, as code ported to float16 training does: in float16 it is inf once B * L_max passes 65504 (64 rows at L_max = 1024, a usual batch) and every gradient is 0, where the exact one, 1 / 65536 per token, is a float16 value (subnormal, but not 0). The loss itself is computed in float32 and conforms; the update vanishes. Found by a new user's trial of this suite, not in a public report; the class is the half-precision count (unsloth-zoo's and Liger's fp16 paths). Only a batch past 65504 tokens of denominator shows it: the gradient cells' fixed case of 64 rows of 1031 tokens in float16."""
FRAMEWORK = "torch"
EXPECT = "reject-gradients"
CONTRACT = "reduction"
REDUCTION = "seq-mean-token-sum-norm"
L_MAX = 1024
EXPLAINS = "is the denominator formed in float16"
import torch


class _FixedLength(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token_losses, token_mask):
        acc = torch.promote_types(token_losses.dtype, torch.float32)
        ctx.save_for_backward(token_mask)
        ctx.input_dtype = token_losses.dtype
        total = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
        return total / (max(token_mask.shape[0], 1) * 1024)

    @staticmethod
    def backward(ctx, cotangent):
        (token_mask,) = ctx.saved_tensors
        dtype = ctx.input_dtype
        denominator = torch.tensor(max(token_mask.shape[0], 1), dtype=dtype) * 1024  # the bug: inf in float16
        return torch.where(token_mask, cotangent.to(dtype) / denominator, torch.zeros((), dtype=dtype)), None


def loss_normalization(token_losses, token_mask):
    return _FixedLength.apply(token_losses, token_mask)
