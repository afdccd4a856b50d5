"""The float64 ground truth: exact forward results (and, in reference.vjp, exact gradients)."""

from reference.forward import OUTPUT_KEYS, Expected, reference
from reference.vjp import Gradients, complete_cotangents, vjp

__all__ = ["OUTPUT_KEYS", "Expected", "Gradients", "complete_cotangents", "reference", "vjp"]
