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
FOREIGN = "its module imports torch, not numpy, and it is given numpy's arrays (--framework numpy): written for " \
          "--framework torch?"
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
    assert not undeclared.ok and all(UNDECLARED in message and message.endswith(
        "declare its mode (--reduction MODE on the command line, reduction=... in check)")
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


@pytest.mark.parametrize(("fn", "framework", "expected"), [
    (_reduction_with_mode, "numpy", UNDECLARED),
    (functools.partial(_reduction_with_mode, mode="token-mean"), "numpy", UNDECLARED),  # a partial: its function's
    (_raises, "numpy", None),
])
def test_the_hint_is_read_from_the_function_and_its_module(fn, framework, expected):
    from reference.contracts import get_contract

    libraries = {"numpy": ("numpy",), "jax": ("jax", "jax.numpy")}[framework]
    hint = misfit_hint(fn, framework, libraries, get_contract("magnitude"))
    assert (hint is None) if expected is None else (expected in hint)


def test_a_declared_contract_gets_no_undeclared_hint():
    from reference.contracts import get_contract

    assert misfit_hint(_reduction_with_mode, "numpy", ("numpy",), get_contract("reduction", {"mode": "token-mean"})) \
        is None
