"""torch.compile really compiles (counted), does not recompile per shape, and never falls back to eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import impls  # noqa: E402
from reference.case import Case  # noqa: E402
from tests.conftest import implementation_devices  # noqa: E402

COMPILE_PARAMS = [p for p in implementation_devices() if p.values[0] == "torch-compile"]


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize(("name", "device"), COMPILE_PARAMS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_twenty_random_shapes_compile_at_most_twice(name, device, dtype):
    impl = impls.get_implementation(name)
    rng = np.random.default_rng(20)
    before = _graphs()
    for _ in range(20):
        batch, tokens = int(rng.integers(2, 40)), int(rng.integers(2, 600))
        lp = np.round(-rng.random((batch, tokens)) * 16) / 4
        case = Case(lp, np.ones(batch), rng.random((batch, tokens)) < 0.7, dtype=dtype, device=device)
        with impl.scope(case):
            out = impl(*impl.adapter.materialize(case))
        assert out["sequence_summed"].shape == (batch,)
    compiled = _graphs() - before
    assert compiled <= 2, f"{compiled} compilations for 20 shapes"


def test_it_is_really_compiled_and_cannot_fall_back_to_eager():
    impl = impls.get_implementation("torch-compile")
    before = _graphs()
    case = Case(np.full((3, 5), -1.0), np.ones(3), np.ones((3, 5), bool), dtype="float16")
    with impl.scope(case):
        impl(*impl.adapter.materialize(case))
        import torch._dynamo

        assert torch._dynamo.config.fail_on_recompile_limit_hit is True  # while the harness calls compiled code
    assert torch._dynamo.config.fail_on_recompile_limit_hit is False  # and only then: the user's setting is back
    assert _graphs() >= before  # a graph exists for float16 (compiled now or earlier in this session)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from impls.torch_compile import compiled_row_pass

    # The float16 variant's own copy of the function holds at least its compiled entry.
    copies = [copy for (dtype, *_), (copy, _) in compiled_row_pass.variants.items() if dtype == torch.float16]
    assert copies and all(len(_debug_get_cache_entry_list(copy.__code__)) >= 1 for copy in copies)


def test_hitting_the_recompile_limit_is_an_error_not_eager():
    import torch._dynamo

    def plain(x):
        return x * 2

    compiled = torch.compile(plain, fullgraph=True, dynamic=False)
    adapter = impls.get_implementation("torch-compile").adapter
    case = Case(np.zeros((1, 1)), np.zeros(1), np.ones((1, 1), bool))
    with adapter.scope(case, compiled=True), torch._dynamo.config.patch(recompile_limit=2):
        compiled(torch.zeros(1))
        compiled(torch.zeros(2))
        with pytest.raises(Exception, match="recompile"):
            compiled(torch.zeros(3))


@pytest.mark.parametrize(("name", "device"), COMPILE_PARAMS)
@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (3, 0)])
def test_an_empty_batch_runs_the_traced_function_as_it_is_with_a_gradient(name, device, shape):
    """Nothing to fuse: no graph is compiled, and no 0-element kernel launched (inductor's CUDA launcher in
    torch 2.11 divided by zero sizing one in the backward); the outputs and their gradients are exactly 0."""
    from impls.torch_compile import sequence_vs_token_normalization

    lp = torch.zeros(shape, device=device, requires_grad=True)
    adv = torch.ones(shape[0], device=device, requires_grad=True)
    before = _graphs()
    out = sequence_vs_token_normalization(lp, adv, torch.zeros(shape, dtype=torch.bool, device=device))
    assert _graphs() == before
    (out["sequence_summed"].sum() + out["token_averaged"].sum() + out["magnitude_ratio"]).backward()
    assert float(out["magnitude_ratio"]) == 0.0 and lp.grad.shape == shape and not lp.grad.any()
    assert adv.grad is not None and not adv.grad.any()


def _per_chunk_compiled_only(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    """A correct per-chunk token-mean (the step's global count, x dp_size) that raises unless it runs compiled, under
    the harness's policy for compiled calls (dynamo's recompile limit raised: read when it is traced)."""
    import torch._dynamo

    if not torch.compiler.is_compiling():
        raise RuntimeError("called eagerly")
    if torch._dynamo.config.recompile_limit < 256:
        raise RuntimeError("called outside the harness's compile policy")
    wide = token_losses.to(torch.promote_types(token_losses.dtype, torch.float32))
    total = torch.where(token_mask, wide, 0.0).sum()
    return (total / max(num_tokens, 1) * dp_size).to(token_losses.dtype)


def _per_chunk_own_count(token_losses, token_mask, *, num_tokens, num_sequences, dp_size, accumulation_steps):
    """Each micro-batch divided by its own token count: the mean of per-micro-batch means."""
    wide = token_losses.to(torch.promote_types(token_losses.dtype, torch.float32))
    total = torch.where(token_mask, wide, 0.0).sum()
    return (total / token_mask.sum().clamp(min=1) * dp_size / accumulation_steps).to(token_losses.dtype)


def test_a_per_chunk_loss_runs_compiled_with_its_step_keywords_under_the_harness_compile_policy():
    """`--framework torch-compile --accumulation`: the compiled function gets the step's keywords, under the
    policy of every compiled call of the harness (dynamo's recompile limit raised, hitting it an error); a mean of
    per-micro-batch means is still found."""
    from fuzz import check

    few = {"framework": "torch-compile", "reduction": "token-mean", "accumulation": True, "dtypes": ["float32"],
           "max_examples": 10, "gradients": False, "workers": 1}
    report = check(_per_chunk_compiled_only, **few)
    assert report.ok, str(report)
    buggy = check(_per_chunk_own_count, **few, fail_fast=True)
    assert not buggy.ok and all("raised" not in failure.message for failure in buggy.failures), str(buggy)
