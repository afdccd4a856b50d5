"""Bug: the step's token count is held as a tensor of the model's compute dtype, bfloat16
(`torch.tensor(num_tokens, dtype=torch.bfloat16)`, or a mask cast to it and summed), as mixed-precision code
does with every tensor it builds: bfloat16 holds integers exactly only to 256, so N = 845 becomes 844. The loss is a little off wherever N has more than 8 significant bits,
in every dtype the losses come in. The sum is selected and kept in float32, and dp_size is right. Wrong when:
one micro-batch of 257 tokens of 1.0 -> 257 / 256 instead of 1."""
FRAMEWORK = "torch"
EXPECT = "reject"
CONTRACT = "accumulation"
REDUCTION = "token-mean"
EXPLAINS = "kept in bfloat16"
import torch


def loss_normalization(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    count = torch.tensor(max(num_tokens, 1), dtype=torch.bfloat16)  # the bug: N rounded to bfloat16
    loss_sum = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    return (loss_sum / count.to(acc) * dp_size).to(token_losses.dtype)
