"""Counts response lengths with a running counter in the loss dtype, one step per generated token as a rollout loop does (`response_length += ~done`, kept next to the bfloat16 log-probs), then divides the batch's token sum by their total. In bfloat16 the counter sticks at 256 (256 + 1 rounds back to 256: bfloat16 has 8 significant bits), so any response longer than 256 tokens is counted as 256 and its tokens are weighted too much. Not from one report: the classic low-precision counter. Wrong when: bfloat16, one row of 300 selected tokens all 1 -> 300/256 = 1.171875 instead of 1."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "reduction"
REDUCTION = "token-mean"
import torch


def loss_normalization(token_losses, token_mask):
    batch, tokens = token_losses.shape
    response_length = torch.zeros(batch, dtype=token_losses.dtype, device=token_losses.device)
    for t in range(tokens):
        response_length = response_length + token_mask[:, t].to(token_losses.dtype)  # the bug: a bf16 counter
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    num_tokens = response_length.to(acc).sum().clamp(min=1)
    return torch.where(token_mask, token_losses.to(acc), 0.0).sum() / num_tokens
