"""Returns the magnitude ratio as a Python float via .item() (a logging habit), not a 0-d tensor; also breaks torch.compile graphs. Wrong when: any input, e.g. lp=[[-1,-2],[-3,-4]], A=[2,-1], mask all true -> magnitude_ratio is float 2.0, not a tensor."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    acc = torch.promote_types(token_log_probs.dtype, torch.float32)
    selected = torch.where(token_mask, token_log_probs.to(acc), 0.0)
    summed = advantages.to(acc) * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum().item()
    ratio = summed.abs().sum().item() / den if den > 0 else 0.0
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio}
