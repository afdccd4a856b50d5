"""A function that raises, or returns the wrong structure, because it was written for another framework than the
one it is checked under is told so beside that failure (fuzz/judge/misfit.py); a loss reduction checked as the
default magnitude diagnostic is refused before any call, with how to declare it (fuzz/loader.py). A function that
fits its call gets neither."""

from __future__ import annotations

import functools
import re

import pytest

from fuzz import check
from fuzz.judge.misfit import misfit_of
from fuzz.loader import CallShapeError, check_call_shape
from reference.contracts import get_contract

AGG_LOSS = '''
import numpy as np

def agg_loss(loss_mat, loss_mask, loss_agg_mode="token-mean"):  # verl's signature, its mode defaulted
    if loss_agg_mode != "token-mean":
        raise ValueError(f"unknown mode {loss_agg_mode!r}")
    total = np.where(loss_mask, loss_mat, 0).sum(dtype=np.float64).astype(loss_mat.dtype)
    return total / np.maximum(loss_mask.sum(), 1).astype(loss_mat.dtype)
'''

TORCH_TOKEN_MEAN = '''
import numpy as np
import torch

def token_mean(token_losses, token_mask):
    total = torch.where(token_mask, token_losses, 0).sum()
    return total / token_mask.sum().clamp(min=np.float32(1))
'''

FEW = {"dtypes": ["float32"], "max_examples": 5}
MAGNITUDE = get_contract("magnitude")
DECLARE = "reduction is declared with its mode: --reduction MODE on the command line, reduction=... in check"


def _module(tmp_path, name: str, source: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return str(path)


def test_a_reduction_checked_without_its_mode_is_refused_before_any_call(tmp_path):
    target = _module(tmp_path, "verl_like", AGG_LOSS) + ":agg_loss"
    with pytest.raises(CallShapeError, match=re.escape(
            "agg_loss looks like a loss reduction of (token_losses, token_mask) and a mode: its third parameter, "
            "loss_agg_mode, is a mode, where the magnitude diagnostic (checked when no contract is declared) passes "
            "token_mask, fn(token_log_probs, advantages, token_mask). A " + DECLARE + " (its loss_agg_mode defaults "
            "to 'token-mean')") + "$"):
        check(target, framework="numpy", **FEW)
    assert check(target, framework="numpy", reduction="token-mean", **FEW).ok  # declared: it conforms


def test_a_function_of_another_framework_is_told_which_one(tmp_path):
    """torch code with NumPy constants, checked under NumPy: the NumPy it also uses says nothing of the framework."""
    pytest.importorskip("torch")
    target = _module(tmp_path, "torch_loss", TORCH_TOKEN_MEAN) + ":token_mean"
    report = check(target, framework="numpy", reduction="token-mean", **FEW)
    hint = "\nhint: its code uses torch and it is given numpy's arrays: written for --framework torch?"
    assert not report.ok and all(failure.message.startswith("raised ") and failure.message.endswith(hint)
                                 for failure in report.failures)


def _raises(lp, adv, mask):  # a magnitude function of the checked framework: its own failure, no hint
    raise ValueError("a bug of its own")


def test_a_function_that_fits_its_call_raises_without_a_hint():
    report = check(_raises, framework="numpy", **FEW)
    assert report.failures and all(failure.message == "raised ValueError: a bug of its own"
                                   for failure in report.failures)


def _reduction_with_mode(token_losses, token_mask, mode="token-mean"):
    raise ValueError("never called")


def _verl_agg_loss(loss_mat, loss_mask, loss_agg_mode: str, dp_size: int = 1):  # verl's: the mode is required
    raise ValueError("never called")


def _logged(fn):  # a decorator of the usual kind: its wrapper takes anything
    @functools.wraps(fn)
    def wrapper(*args, **keywords):
        return fn(*args, **keywords)
    return wrapper


class _TakesAnything:
    def __call__(self, *arrays):
        raise ValueError("a bug of its own")


class _AnswersEveryAttribute:  # a proxy: every attribute it is asked for is a new one
    def __getattr__(self, name):
        return _AnswersEveryAttribute()

    def __call__(self, lp, adv, mask):
        raise ValueError("a bug of its own")


@pytest.mark.parametrize(("fn", "refused"), [
    (_reduction_with_mode, "(its mode defaults to 'token-mean')"),
    (_logged(_reduction_with_mode), "(its mode defaults to 'token-mean')"),  # the function written, not its wrapper
    (_verl_agg_loss, "its loss_agg_mode has no default: bind it and check that: "
                     "`functools.partial(_verl_agg_loss, loss_agg_mode=...)` or a lambda"),
    (lambda loss_mat, loss_mask, loss_type: None, "its loss_type has no default"),  # named as trainers name one
    (_raises, None),
    (_logged(_raises), None),
    (lambda lp, adv, mask=None: None, None),  # an optional third input is no mode
    (lambda lp, adv, mask, mode="x": None, None),  # a mode after the magnitude's three inputs
    (_TakesAnything(), None),
    (_AnswersEveryAttribute(), None),
    (max, None),
])
def test_a_mode_where_the_default_contract_passes_its_mask_is_refused(fn, refused):
    if refused is None:
        check_call_shape(fn, MAGNITUDE, "fn")  # raises nothing
    else:
        with pytest.raises(CallShapeError, match=re.escape(refused)):
            check_call_shape(fn, MAGNITUDE, "fn")


def test_a_declared_reduction_with_a_required_mode_is_told_to_bind_it():
    with pytest.raises(CallShapeError, match=re.escape(
            "missing a required argument: 'loss_agg_mode'; bind it and check that: "
            "`functools.partial(_verl_agg_loss, loss_agg_mode=...)` or a lambda (for the command line, in a file of "
            "yours)") + "$"):
        check_call_shape(_verl_agg_loss, get_contract("reduction", {"mode": "token-mean"}), "fn")


FROM_IMPORTS = """
import numpy as np
from torch import where

def from_torch(token_losses, token_mask):
    return where(token_mask, token_losses, 0).sum() / np.float32(1)

def helper(x):
    return where(x, x, 0)

def through_a_helper(token_losses, token_mask):
    return helper(token_mask)

def numpy_only(token_losses, token_mask):
    return np.where(token_mask, token_losses, 0).sum()
"""


@pytest.mark.parametrize(("name", "framework", "expected"), [
    ("from_torch", "numpy", "its code uses torch and it is given numpy's arrays"),  # NumPy beside torch: no veto
    ("from_torch", "jax", "its code uses torch and numpy, not jax, and it is given jax's arrays"),
    ("from_torch", "torch", None),
    ("through_a_helper", "jax", "its code uses torch, not jax,"),  # what its own helper uses
    ("numpy_only", "torch", "its code uses numpy, not torch,"),  # the module's torch import is not used by it
    ("numpy_only", "numpy", None),
])
def test_the_framework_is_read_from_the_names_the_code_uses(tmp_path, name, framework, expected):
    pytest.importorskip("torch")
    from fuzz.loader import load_target

    function = load_target(_module(tmp_path, "mixed", FROM_IMPORTS) + f":{name}").function
    libraries = {"numpy": ("numpy", "ml_dtypes"), "jax": ("jax", "jax.numpy"), "torch": ("torch",)}[framework]
    misfit = misfit_of(function, framework, libraries, get_contract("reduction", {"mode": "token-mean"}))
    hint = misfit and misfit.on_raise
    assert (hint is None) if expected is None else (expected in hint), hint


@pytest.mark.parametrize("fn", [_TakesAnything(), _AnswersEveryAttribute(), max, _logged(_raises)])
def test_a_function_that_cannot_be_read_gets_no_hint(fn):
    assert misfit_of(fn, "jax", ("jax",), get_contract("reduction", {"mode": "grpo"})) is None


def test_a_mode_left_at_a_default_naming_another_is_said_beside_any_failure(tmp_path):
    """verl's `agg_loss` with its mode defaulted to token-mean, checked as seq-mean-token-mean without binding it:
    its wrong loss is the token mean, and the hint says why. Bound, or declared as its default, nothing is said."""
    target = _module(tmp_path, "verl_like", AGG_LOSS) + ":agg_loss"
    report = check(target, framework="numpy", reduction="seq-mean-token-mean", **FEW)
    hint = ("\nhint: its loss_agg_mode defaults to 'token-mean', where seq-mean-token-mean is declared: bind it? "
            "(`functools.partial(agg_loss, loss_agg_mode=...)`)")
    assert not report.ok and all(failure.message.endswith(hint) for failure in report.failures)
    contract = get_contract("reduction", {"mode": "bnpo"})  # an alias of token-mean: the default is that mode
    assert misfit_of(_reduction_with_mode, "numpy", ("numpy",), contract) is None
    assert misfit_of(functools.partial(_reduction_with_mode, mode="grpo"), "numpy", ("numpy",),
                     get_contract("reduction", {"mode": "grpo"})) is None


def _mask_first(mask, losses):
    import torch

    return torch.where(mask, losses.to(torch.promote_types(losses.dtype, torch.float32)), 0).sum() / mask.sum().clamp(
        min=1)


def test_parameters_that_name_the_inputs_in_another_order_are_said_with_the_lambda_that_reorders_them():
    """`fn(mask, losses)` called as fn(token_losses, token_mask) fails whatever it does; beside that failure, its
    parameters' names say the order it wants, and the lambda shown, checked as shown, conforms."""
    pytest.importorskip("torch")
    report = check(_mask_first, framework="torch", reduction="token-mean", **FEW)
    assert not report.ok
    shown = "`lambda token_losses, token_mask: fn(token_mask, token_losses)`"
    assert "hint: its parameters (mask, losses) name the inputs in another order" in report.failures[0].message
    assert shown in report.failures[0].message, report.failures[0].message
    assert check(eval(shown.strip("`"), {"fn": _mask_first}), framework="torch", reduction="token-mean", **FEW).ok


def _magnitude(log_probs, mask, advantages):
    return {}


@pytest.mark.parametrize(("function", "contract", "expected"), [
    (_magnitude, MAGNITUDE, "`lambda token_log_probs, advantages, token_mask: fn(token_log_probs, token_mask, "
                            "advantages)`"),
    (lambda losses_, mask_, extra=None: 0, "reduction", None),  # in the call's order
    (lambda loss_mat, loss_mask, loss_agg_mode="token-mean": 0, "reduction", None),  # verl's
    (lambda values, mask: 0, "reduction", None),  # NeMo-RL's masked_mean: a name that names no input
    (lambda masked_losses, mask: 0, "reduction", None),  # a name that names two inputs names none
    (lambda x, m: 0, "reduction", None),
    (lambda *arguments: 0, "reduction", None),
    (lambda mask, values: 0, "reduction", "fn(token_losses, token_mask): bind them in the call's order?"),
    # a per-chunk loss: the lambda passes the step's keywords on, as the engine calls it with them
    (lambda mask, losses, **step: 0, "accumulation",
     "`lambda token_losses, token_mask, **keywords: fn(token_mask, token_losses, **keywords)`"),
])
def test_only_parameters_named_for_another_input_are_said_to_be_in_another_order(function, contract, expected):
    """The mask named first where the call passes it second is said (with the lambda where every parameter names
    one input); a parameter that names no input, or two, or the one the call passes there, says nothing."""
    bound = contract if contract is MAGNITUDE else get_contract(contract, {"mode": "token-mean"})
    misfit = misfit_of(function, "torch", ("torch",), bound)
    said = [hint for hint in (misfit.on_any if misfit else ()) if "another order" in hint]
    assert (said == []) if expected is None else (len(said) == 1 and expected in said[0]), said


def _integer_mask_code(token_losses, token_mask):
    import torch

    padding = 1 - token_mask  # written for TRL's integer completion_mask
    selected = token_losses.to(torch.promote_types(token_losses.dtype, torch.float32)).masked_fill(padding.bool(), 0)
    return selected.sum() / token_mask.sum().clamp(min=1)


def test_arithmetic_a_bool_mask_does_not_allow_is_told_how_to_check_code_for_integer_masks():
    """`1 - mask` raises on the contract's bool mask; beside that raise, the lambda that passes the mask as the
    trainer does (an integer one), which, checked as shown, conforms; a raise of anything else gets no such hint."""
    pytest.importorskip("torch")
    report = check(_integer_mask_code, framework="torch", reduction="token-mean", **FEW)
    shown = "`lambda token_losses, token_mask: fn(token_losses, token_mask.long())`"
    assert not report.ok and shown in report.failures[0].message, report.failures[0].message
    assert "the call passes token_mask as a bool array" in report.failures[0].message
    assert check(eval(shown.strip("`"), {"fn": _integer_mask_code}), framework="torch", reduction="token-mean",
                 **FEW).ok
    other = check(lambda token_losses, token_mask: token_losses.sum() / 0 + int("x"), framework="torch",
                  reduction="token-mean", **FEW)
    assert not other.ok and "integer masks" not in other.failures[0].message, other.failures[0].message
