"""Stays in the input dtype throughout, counting tokens with mask.to(lp.dtype).sum(-1) (259 rounds to 260 in bf16) and rounding the row sum, the product and the quotient separately. Wrong when: bf16, one row of 259 selected tokens [-1]*4 + [-2]*255, A=[1] -> token_averaged -1.96875 instead of -1.984375 (2 bf16 ulp)."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    zero = torch.zeros((), dtype=token_log_probs.dtype, device=token_log_probs.device)
    selected = torch.where(token_mask, token_log_probs, zero)
    summed = advantages * selected.sum(dim=-1)
    n = token_mask.to(token_log_probs.dtype).sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), zero)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), zero)
    return {"sequence_summed": summed, "token_averaged": averaged, "magnitude_ratio": ratio}
