"""Always computes in float32 (.float()) and casts back, which silently loses precision for float64 inputs. Wrong when: float64, lp=[[-0.1]], A=[1], mask=[[T]] -> sequence_summed -0.10000000149011612 instead of -0.1."""
FRAMEWORK = "torch"
EXPECT = "reject"
import torch


def loss_normalization(token_log_probs, advantages, token_mask):
    selected = torch.where(token_mask, token_log_probs.float(), 0.0)
    summed = advantages.float() * selected.sum(dim=-1)
    n = token_mask.sum(dim=-1)
    averaged = torch.where(n > 0, summed / n.clamp(min=1), 0.0)
    den = averaged.abs().sum()
    ratio = torch.where(den > 0, summed.abs().sum() / torch.where(den > 0, den, 1.0), 0.0)
    dt = token_log_probs.dtype
    return {"sequence_summed": summed.to(dt), "token_averaged": averaged.to(dt), "magnitude_ratio": ratio.to(dt)}
