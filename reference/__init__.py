"""The float64 ground truth: each function under test as a contract (reference/contract.py), one module per
contract with its exact forward and VJP, tolerance, relations and input domain; the one tolerance model
(tolerance.py); the framework-neutral Case (case.py); dtype facts (dtypes.py). NumPy (and ml_dtypes' bfloat16) only."""

from reference.case import Case
from reference.contract import Contract
from reference.contracts import CONTRACT_NAMES, get_contract
from reference.exact import exact_results

__all__ = ["CONTRACT_NAMES", "Case", "Contract", "exact_results", "get_contract"]
