"""The loss reduction with its one pass over the tokens under `torch.compile(fullgraph=True, dynamic=True)`.

Every mode reads each row's losses and mask once for its sum and count and then divides a few scalars, so the
pass is what is compiled, once per dtype, device, stride pattern and autograd variant, and shared by all five
modes: compiling each mode whole would compile that same pass five times. It is written as
impls/torch_compile.py writes its pass (the mask as its bytes, converted to 0.0/1.0 once, the sum and the count
fused into one loop, sizes unbacked with typical hints), and compiled per variant the same way, so a library
user never reaches dynamo's recompile limit. The scalars after it are impls/torch_eager_reduction.py's.
"""

from __future__ import annotations

import torch

from impls.torch_compile import compile_per_variant, count_dtype_for
from impls.torch_eager_reduction import reduce_rows, validate


def row_pass(token_losses: torch.Tensor, mask_bytes: torch.Tensor,
             count_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """What torch.compile traces: each row's sum of selected losses (float32 for half inputs) and its count."""
    accumulate = torch.promote_types(token_losses.dtype, torch.float32)
    selected = mask_bytes.to(accumulate)
    sums = torch.where(selected != 0, token_losses.to(accumulate), 0).sum(dim=-1)
    return sums, selected.to(count_dtype).sum(dim=-1)


compiled_row_pass = compile_per_variant(row_pass, (("batch", "tokens"), ("batch", "tokens")))


def loss_reduction(token_losses: torch.Tensor, token_mask: torch.Tensor, *, mode: str = "token-mean",
                   rows: str = "all", l_max: float | None = None) -> torch.Tensor:
    """The scalar loss of `mode` (reference/reduction.py), as impls/torch_eager_reduction.loss_reduction."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    sums, counts = compiled_row_pass(token_losses, token_mask.view(torch.uint8), count_dtype_for(token_losses))
    loss = reduce_rows(sums, counts, str(declared["mode"]), str(declared["rows"]), declared["l_max"])
    return loss.to(sums.dtype)
