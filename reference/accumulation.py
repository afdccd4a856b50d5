"""The loss reduction over micro-batches and data-parallel ranks: the per-chunk loss of a trainer's step, whose
combination over the step's R x G chunks must equal the full-batch loss (the gradient-accumulation invariant).

A step's batch is split over R data-parallel ranks and G accumulation steps per rank: R x G chunks of rows, of
any sizes (uneven, empty, only fully masked rows), each padded to its own width or to the step's. The function
under test is the per-chunk loss

    fn(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps) -> loss

called on each chunk with the step's global normalizers: num_tokens = N and num_sequences = D (as `rows`
declares) over the whole step, dp_size = R, accumulation_steps = G (Python ints), and the mode's L_max as
declared. Each chunk's loss is backpropagated, a rank's gradients are summed over its chunks, the ranks'
gradients are averaged (`dp_reduce="mean"`, DDP and FSDP) or summed (`"sum"`), and the backward may be scaled by
1/G (`backward_scale="1/G"`, DeepSpeed's and the HF Trainer's accumulation). The combined loss (the same
combination of the chunk losses) must equal the full-batch loss of the declared mode (reference/reduction.py),
and every token's combined gradient its full-batch gradient. An empty chunk gives exactly 0 and a zero gradient
that exists.

So the exact results are the reduction's, of the whole step: this contract differs in the calling convention,
which the engines own (fuzz/engines/), and in its tolerance, which allows what the combination adds: every chunk
rounds its own loss, and multiplies by its compensation (dp_size, or G).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from reference import reduction
from reference.contract import Contract, Parameter
from reference.tolerance import CONTRACT, Precision

DP_REDUCE = ("mean", "sum")
BACKWARD_SCALE = ("1", "1/G")
# What combining the chunks adds to each path, in roundings in the input dtype: the chunk's compensation
# multiply (x dp_size, x G) and its own cast, forward; the same two and the ranks' mean (a division by R, in the
# gradient's dtype), backward.
COMBINATION_ROUNDINGS = 2
COMBINATION_BACKWARD_ROUNDINGS = 3


def tolerance(expected: reduction.Exact, dtype: str, precision: Precision = CONTRACT) -> dict[str, np.ndarray]:
    """The full-batch loss's bound with the combination's roundings: each chunk's row errors, batch sum (over at
    most B rows) and final roundings add up over the chunks to the full batch's (docs/tolerance.md)."""
    return reduction.tolerance(expected, dtype, precision, extra=COMBINATION_ROUNDINGS)


def gradient_tolerance(gradients: reduction.Gradients, cotangents: dict[str, np.ndarray], dtype: str,
                       precision: Precision = CONTRACT) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return reduction.gradient_tolerance(gradients, cotangents, dtype, precision, extra=COMBINATION_BACKWARD_ROUNDINGS)


def compensation(bound: dict[str, object], dp_size: int, accumulation_steps: int) -> float:
    """What each chunk's loss is multiplied by so that the combination gives the full-batch loss: dp_size
    against the ranks' mean, G against a 1/G backward scale."""
    factor = float(dp_size) if bound["dp_reduce"] == "mean" else 1.0
    return factor * (float(accumulation_steps) if bound["backward_scale"] == "1/G" else 1.0)


def _label(bound: dict[str, object]) -> str:
    reduce = reduction.CONTRACT.parameter_label or str
    mode_text = reduce({key: bound[key] for key in ("mode", "rows", "l_max")})
    return f"{mode_text}, dp_reduce={bound['dp_reduce']}, backward_scale={bound['backward_scale']}"


def _rules(bound: dict[str, object]) -> dict[str, object]:
    return reduction._parameter_rules(bound)


PARAMETERS = (
    *reduction.PARAMETERS,
    Parameter("dp_reduce", DP_REDUCE, "mean", "how the ranks' gradients combine: averaged (DDP, FSDP) or summed"),
    Parameter("backward_scale", BACKWARD_SCALE, "1",
              "what each chunk's backward is scaled by: 1 (gradients summed over the chunks) or 1/G (DeepSpeed, "
              "the HF Trainer)"),
)

# The campaign fuzzes the built-ins in every mode and convention, one drawn per example.
CAMPAIGN_PARAMETERS = tuple({**base, "dp_reduce": dp, "backward_scale": scale}
                            for base in reduction.CAMPAIGN_PARAMETERS for dp in DP_REDUCE for scale in BACKWARD_SCALE)

CONTRACT: Contract = replace(
    reduction.CONTRACT,
    name="accumulation",
    title="the loss reduction over micro-batches and data-parallel ranks",
    signature="fn(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps) -> loss",
    tolerance=tolerance,
    gradient_tolerance=gradient_tolerance,
    relations=(),  # the engines' splits are its metamorphic relation: every split must give the same loss
    parameters=PARAMETERS,
    parameter_rules=_rules,
    parameter_menu=CAMPAIGN_PARAMETERS,
    parameter_label=_label,
    explain=None,  # the engines name a wrong combination's factor (fuzz/engines/accumulation.py)
    examples=(),
)
