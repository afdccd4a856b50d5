"""The loss reduction with its one pass over the tokens under `torch.compile(fullgraph=True, dynamic=True)`.

Every mode reads each row's losses and mask once for its sum and count and then divides a few scalars, so the
pass is what is compiled, once per dtype, device, stride pattern and autograd variant, and shared by all five
modes: compiling each mode whole would compile that same pass five times. The pass is impls/torch_compile.py's
own `compiled_row_pass` (the mask as its bytes, converted to 0.0/1.0 once, the sum and the count fused into one
loop, sizes unbacked with typical hints, a compiled copy per variant so that a library user never reaches
dynamo's recompile limit): the magnitude contract's compiled built-in runs the same graphs. The scalars after it
are impls/torch_eager_reduction.py's.
"""

from __future__ import annotations

import torch

from impls.torch_compile import compiled_row_pass, count_dtype_for
from impls.torch_eager_reduction import reduce_rows, validate


def loss_reduction(token_losses: torch.Tensor, token_mask: torch.Tensor, *, mode: str = "token-mean",
                   rows: str | None = None, l_max: float | None = None) -> torch.Tensor:
    """The scalar loss of `mode` (reference/reduction.py), as impls/torch_eager_reduction.loss_reduction."""
    declared = validate(token_losses, token_mask, mode, rows, l_max)
    sums, counts = compiled_row_pass(token_losses, token_mask.view(torch.uint8), count_dtype_for(token_losses))
    loss = reduce_rows(sums, counts, str(declared["mode"]), str(declared["rows"]), declared["l_max"])
    return loss.to(sums.dtype)
