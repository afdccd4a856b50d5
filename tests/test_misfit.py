"""A function that raises, or returns the wrong structure, because of how it was checked rather than what it
computes is told so beside that failure: a loss reduction checked as the default magnitude diagnostic, a function
of one framework given another's arrays. A function that fits its call gets no such hint."""

from __future__ import annotations

import functools

import pytest

from fuzz import check
from fuzz.judge.misfit import misfit_hint

AGG_LOSS = '''
import numpy as np

def agg_loss(loss_mat, loss_mask, loss_agg_mode="token-mean"):  # verl's signature, its mode defaulted
    if loss_agg_mode != "token-mean":
        raise ValueError(f"unknown mode {loss_agg_mode!r}")
    total = np.where(loss_mask, loss_mat, 0).sum(dtype=np.float64).astype(loss_mat.dtype)
    return total / np.maximum(loss_mask.sum(), 1).astype(loss_mat.dtype)
'''

TORCH_TOKEN_MEAN = '''
import torch

def token_mean(token_losses, token_mask):
    total = torch.where(token_mask, token_losses, 0).sum()
    return total / token_mask.sum().clamp(min=1)
'''

UNDECLARED = "no contract was declared, so it is checked as the magnitude diagnostic"
FOREIGN = "\nhint: its code uses torch, not numpy, and it is given numpy's arrays: written for --framework torch?"
FEW = {"dtypes": ["float32"], "max_examples": 5}


def _module(tmp_path, name: str, source: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return str(path)


def _messages(report) -> list[str]:
    return [failure.message for failure in report.failures]


def test_a_reduction_checked_without_its_mode_is_told_to_declare_it(tmp_path):
    target = _module(tmp_path, "verl_like", AGG_LOSS) + ":agg_loss"
    undeclared = check(target, framework="numpy", **FEW)
    assert not undeclared.ok and all(f"\nhint: {UNDECLARED}" in message and message.endswith(
        "its third parameter, loss_agg_mode, looks like a loss reduction's mode: if it is a reduction of "
        "(token_losses, token_mask), declare its mode (--reduction MODE on the command line, reduction=... in check)")
        for message in _messages(undeclared))
    assert check(target, framework="numpy", reduction="token-mean", **FEW).ok  # declared: it conforms


def test_a_function_of_another_framework_is_told_which_one(tmp_path):
    pytest.importorskip("torch")
    target = _module(tmp_path, "torch_loss", TORCH_TOKEN_MEAN) + ":token_mean"
    report = check(target, framework="numpy", reduction="token-mean", **FEW)
    assert not report.ok and all(message.startswith("raised ") and message.endswith(FOREIGN)
                                 for message in _messages(report))


def _raises(lp, adv, mask):  # a magnitude function of the checked framework: its own failure, no hint
    raise ValueError("a bug of its own")


def test_a_function_that_fits_its_call_raises_without_a_hint():
    report = check(_raises, framework="numpy", **FEW)
    assert _messages(report) and all(message == "raised ValueError: a bug of its own" for message in _messages(report))


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


@pytest.mark.parametrize(("fn", "expected"), [
    (_reduction_with_mode, UNDECLARED),
    (_logged(_reduction_with_mode), UNDECLARED),  # the function written, not its wrapper's (*args, **keywords)
    (_raises, None),
    (_logged(_raises), None),
    (lambda lp, adv, mask=None: None, None),  # an optional third input is no mode
    (lambda token_losses, token_mask, mode=0.5: None, None),
    (_verl_agg_loss, "bind its loss_agg_mode (a lambda or functools.partial) and declare its mode"),
    (_TakesAnything(), None),
    (_AnswersEveryAttribute(), None),
    (max, None),
])
def test_the_undeclared_reduction_is_read_from_the_function_written(fn, expected):
    from reference.contracts import get_contract

    hint = misfit_hint(fn, "numpy", ("numpy",), get_contract("magnitude"))
    assert (hint is None) if expected is None else (expected in hint)


def test_a_declared_contract_gets_no_undeclared_hint():
    from reference.contracts import get_contract

    assert misfit_hint(_reduction_with_mode, "numpy", ("numpy",), get_contract("reduction", {"mode": "token-mean"})) \
        is None


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
    ("from_torch", "numpy", None),  # it uses numpy too: no guess
    ("from_torch", "jax", "its code uses torch and numpy, not jax"),
    ("through_a_helper", "jax", "its code uses torch, not jax"),  # what its own helper uses
    ("numpy_only", "torch", "its code uses numpy, not torch"),  # the module's torch import is not used by it
    ("numpy_only", "numpy", None),
])
def test_the_framework_is_read_from_the_names_the_code_uses(tmp_path, name, framework, expected):
    pytest.importorskip("torch")
    from fuzz.loader import load_target
    from reference.contracts import get_contract

    function = load_target(_module(tmp_path, "mixed", FROM_IMPORTS) + f":{name}").function
    libraries = {"numpy": ("numpy", "ml_dtypes"), "jax": ("jax", "jax.numpy"), "torch": ("torch",)}[framework]
    hint = misfit_hint(function, framework, libraries, get_contract("reduction", {"mode": "token-mean"}))
    assert (hint is None) if expected is None else (expected in hint), hint
