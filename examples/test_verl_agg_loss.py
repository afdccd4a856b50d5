"""How a trainer's own test suite fuzzes its loss reduction: one test per mode (README, "Check your own function")."""

import functools

import pytest
from verl_agg_loss import agg_loss, chunk_loss

import fuzz

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.mark.parametrize("mode", MODES)
def test_agg_loss(mode):
    fn = functools.partial(agg_loss, loss_agg_mode=mode, loss_scale_factor=1024)
    fuzz.check(fn, framework="torch", reduction=mode, rows="nonempty", l_max=1024).raise_for_failures()


def test_agg_loss_over_micro_batches_and_ranks():
    fuzz.check(chunk_loss, framework="torch", reduction="token-mean", accumulation=True).raise_for_failures()
