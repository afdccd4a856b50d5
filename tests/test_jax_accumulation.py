"""`check --accumulation --ranks --framework jax`: a per-chunk loss's rank form under jax.shard_map over host CPU
devices (fuzz/engines/jax_accumulation.py). A rank form that raises, or kills the mesh worker, fails its cell with
a message saying so; the rows the engine adds to make every micro-batch one shape are rows of the step, so the
exact results are those of the step the function sees; `--ranks` takes torch and jax, nothing else; the JAX
accumulation built-in compiles one program per shape for every mode."""

from __future__ import annotations

import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.engines.cell import run_sharded_cell
from fuzz.engines.chunks import BUCKET_ROWS, BUCKET_WIDTHS, SHAPES, bucketed_chunks, chunk_case, draw_chunks
from fuzz.engines.jax_accumulation import uniform_chunks
from fuzz.engines.plan import plan_sharded_cells
from fuzz.engines.torch_ranks import TIMEOUT_VARIABLE
from fuzz.judge.draws import cases
from fuzz.run.subjects import SubjectSpec, declared_contract
from reference.contracts import get_contract
from reference.exact import exact_results
from tests.test_ranks import rank_cell


def _rank_bug(tmp_path, body: str) -> str:
    path = tmp_path / "jax_rank_bug.py"
    path.write_text(textwrap.dedent("""
        import os

        from impls.jax_jit_accumulation import chunk_loss_on_shards


        def chunk_loss(token_losses, token_mask, *, step_masks, axis_name, accumulation_steps):
        {body}
            return chunk_loss_on_shards(token_losses, token_mask, step_masks=step_masks, axis_name=axis_name,
                                        accumulation_steps=accumulation_steps)
        """).format(body=textwrap.indent(body, " " * 4)))
    return f"{path}:chunk_loss"


@pytest.mark.parametrize(("body", "message"), [
    ("raise ValueError('the rank form is broken')",
     "the step under jax.shard_map (R = 2 devices, each a lax.scan over its G = 1 micro-batch of"),
    ("os._exit(7)", "the JAX mesh worker died during an example (exit code 7"),
], ids=["raises", "exits"])
def test_a_jax_rank_that_fails_fails_its_cell_with_a_clear_message(tmp_path, monkeypatch, body, message):
    monkeypatch.setenv(TIMEOUT_VARIABLE, "20")
    started = time.perf_counter()
    cell = rank_cell(_rank_bug(tmp_path, body), "jax", "jax-accumulation")
    assert not cell.ok
    assert any(message in failure for failure in cell.failures), cell.failures
    if "raise" in body:
        assert any("raised ValueError: the rank form is broken" in failure for failure in cell.failures)
        assert cell.snippet and "jax.shard_map" in cell.snippet
    assert time.perf_counter() - started < 180  # the worker starts in seconds; one failure, not one per shrink


def test_a_bare_jitted_rank_form_is_told_which_keywords_to_mark_static(tmp_path, monkeypatch):
    """`@jax.jit` alone traces `axis_name` (a str) as an array, and JAX refuses it: the failure says what to write."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    path = tmp_path / "jitted_rank_form.py"
    path.write_text(textwrap.dedent("""
        import jax

        from impls.jax_jit_accumulation import chunk_loss_on_shards

        chunk_loss = jax.jit(chunk_loss_on_shards)
        """))
    cell = rank_cell(f"{path}:chunk_loss", "jax", "jax-accumulation")
    assert [bug.kind for bug in cell.bugs] == ["raised TypeError"]
    assert "static_argnames=('axis_name', 'accumulation_steps')" in cell.bugs[0].failures[0]
    static = tmp_path / "static_rank_form.py"
    static.write_text(path.read_text().replace("jax.jit(chunk_loss_on_shards)", "jax.jit(chunk_loss_on_shards, "
                                               "static_argnames=('axis_name', 'accumulation_steps'))"))
    assert rank_cell(f"{static}:chunk_loss", "jax", "jax-accumulation").ok


def _gradient_cell_kinds(target: str) -> set[str]:
    """The bug kinds of the R = 2, G = 1 float32 gradient cell of a token-mean rank form under jax.shard_map."""
    contract, parameters = declared_contract("token-mean", accumulation=True)
    spec = SubjectSpec.of(target, "jax", contract=contract, parameters=parameters)
    tasks = plan_sharded_cells(spec, "jax-accumulation", ["float32"], ["cpu"], 2, 0, True, 2)
    cell = run_sharded_cell(next(task for task in tasks if task.mesh == (2, 1) and task.check.endswith("gradients")))
    return {bug.kind for bug in cell.bugs}


def test_a_jax_rank_forms_exception_is_named_by_the_pass_that_raised_it(tmp_path, monkeypatch):
    """The gradient cell runs the step's forward and backward as one program: what tracing the function raised is
    the forward cell's bug, named the same; what only the backward raised is a backward bug."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    forward = _rank_bug(tmp_path, "raise ValueError('the rank form is broken')")
    assert _gradient_cell_kinds(forward) == {"raised ValueError"}
    backward = tmp_path / "jax_rank_backward_bug.py"
    backward.write_text(textwrap.dedent("""
        import jax
        import jax.numpy as jnp
        from jax import lax


        @jax.custom_vjp
        def summed(values):
            return jnp.sum(values)


        def _forward(values):
            return jnp.sum(values), None


        def _backward(saved, cotangent):
            raise ValueError("the backward is broken")


        summed.defvjp(_forward, _backward)


        def chunk_loss(token_losses, token_mask, *, step_masks, axis_name, accumulation_steps):
            total = summed(jnp.where(token_mask, token_losses, 0).astype(jnp.float32))
            count = lax.psum(sum(jnp.sum(mask, dtype=jnp.int32) for mask in step_masks), axis_name)
            return total / jnp.maximum(count, 1) * lax.axis_size(axis_name)
        """))
    assert _gradient_cell_kinds(f"{backward}:chunk_loss") == {"backward raised ValueError"}
    # raised inside the function's own frame, but only while it is differentiated (a custom_jvp rule runs when the
    # function is traced for its derivative): the forward alone runs, so it is the backward's
    differentiated = tmp_path / "jax_rank_jvp_bug.py"
    differentiated.write_text(backward.read_text().replace("jax.custom_vjp", "jax.custom_jvp").replace(
        "summed.defvjp(_forward, _backward)", "summed.defjvp(lambda primals, tangents: _backward(None, None))"))
    assert _gradient_cell_kinds(f"{differentiated}:chunk_loss") == {"backward raised ValueError"}


@settings(max_examples=60, deadline=None)
@given(st.data(), cases(dtypes=["float32"], contract=get_contract("accumulation", {"mode": "seq-mean-token-mean"})))
def test_every_micro_batch_gets_one_shape_of_rows_of_the_step(data, case):
    """Each chunk keeps its rows, in order, then fully masked rows up to one size from the menu; the step's selected
    tokens and their sums are unchanged, and D under rows="all" is the padded step's, as the function sees it."""
    shape = data.draw(st.sampled_from(SHAPES))
    drawn_case, drawn = draw_chunks(lambda strategy, label: data.draw(strategy, label=label), case, shape)
    padded, split = uniform_chunks(drawn_case, drawn)
    rows = split.rows_per_chunk
    assert rows in BUCKET_ROWS and split.width in BUCKET_WIDTHS and split.width >= padded.shape[1]
    assert split.cuts == tuple(range(0, split.chunks * rows + 1, rows)) and padded.shape[0] == split.chunks * rows
    for k in range(split.chunks):
        original, now = chunk_case(drawn_case, drawn, k), chunk_case(padded, split, k)
        size = original.shape[0]
        assert np.array_equal(now.token_mask[:size, :original.shape[1]], original.token_mask)
        assert not now.token_mask[size:].any() and not now.token_mask[:size, original.shape[1]:].any()
        selected = original.token_mask
        assert np.array_equal(now.token_losses[:size, :original.shape[1]][selected], original.token_losses[selected])
    before, after = exact_results(drawn_case), exact_results(padded)
    assert before.counts.sum() == after.counts.sum() and after.rows_divisor() == padded.shape[0]


@settings(max_examples=60, deadline=None)
@given(st.data(), cases(dtypes=["float32"], contract=get_contract("accumulation", {"mode": "token-mean"})))
def test_in_process_jax_micro_batches_take_a_few_bucketed_shapes(data, case):
    """In this process a JAX function's chunks (XLA compiles each new shape, ~1 s an op sequence) have rows and
    widths from the bucket menus: each chunk keeps its rows and tokens, then fully masked rows; an empty chunk or
    one of width 0 stays so; the step's selected tokens, and so its token-mean, are unchanged."""
    shape = data.draw(st.sampled_from(SHAPES))
    drawn_case, drawn = draw_chunks(lambda strategy, label: data.draw(strategy, label=label), case, shape)
    padded, split = bucketed_chunks(drawn_case, drawn)
    assert padded.shape[1] in BUCKET_WIDTHS or padded.shape[1] & (padded.shape[1] - 1) == 0
    for k in range(split.chunks):
        original, now = chunk_case(drawn_case, drawn, k), chunk_case(padded, split, k)
        size, width = original.shape
        assert now.shape[0] in (0, *BUCKET_ROWS) or now.shape[0] & (now.shape[0] - 1) == 0
        assert (now.shape[0] == 0) == (size == 0) and (now.shape[1] == 0) == (width == 0)
        assert now.shape[1] in (0, padded.shape[1], *BUCKET_WIDTHS) and now.shape[1] >= width
        assert np.array_equal(now.token_mask[:size, :width], original.token_mask)
        assert not now.token_mask[size:].any() and not now.token_mask[:size, width:].any()
        assert np.array_equal(now.token_losses[:size, :width], original.token_losses, equal_nan=True)
    before, after = exact_results(drawn_case), exact_results(padded)
    assert before.counts.sum() == after.counts.sum() and float(before.loss) == float(after.loss)


def test_ranks_take_torch_and_jax_only(capsys):
    from fuzz import check as api_check
    from fuzz.cli import check, check_parser

    target = "impls.jax_jit_accumulation:chunk_loss_on_shards"
    args = check_parser().parse_args([target, "--framework", "numpy", "--reduction", "token-mean", "--accumulation",
                                      "--ranks"])
    assert check(args) == 2
    assert "--framework torch or jax" in capsys.readouterr().err
    with pytest.raises(ValueError, match="framework='torch' or 'jax'"):
        api_check(target, framework="torch-compile", reduction="token-mean", accumulation=True, ranks=True)
    args = check_parser().parse_args([target, "--framework", "jax", "--reduction", "token-mean", "--accumulation",
                                      "--ranks"])
    from fuzz.cli import check_tasks

    tasks = check_tasks(args)
    assert {task.engine for task in tasks} == {"jax-accumulation"} and {task.mesh for task in tasks} == set(SHAPES)


def test_the_jax_accumulation_builtin_compiles_one_program_per_shape_for_every_mode():
    """Every mode is the same row pass and a few scalars: a micro-batch shape seen before compiles nothing in
    another mode, rows, L_max or convention, so the campaign, which draws those per example, compiles a program
    per shape, not per shape and mode."""
    jnp = pytest.importorskip("jax.numpy")
    from impls import jax_jit_accumulation
    from reference.accumulation import CAMPAIGN_PARAMETERS

    losses = jnp.linspace(-1, 1, 3 * 13, dtype=jnp.float32).reshape(3, 13)
    mask = jnp.arange(3 * 13).reshape(3, 13) % 3 > 0
    before = jax_jit_accumulation.compiled_count()
    for parameters in CAMPAIGN_PARAMETERS:
        jax_jit_accumulation.chunk_loss(losses, mask, num_tokens=26, num_sequences=3, dp_size=2,
                                        accumulation_steps=2, **parameters).block_until_ready()
    assert len(CAMPAIGN_PARAMETERS) == 32 and jax_jit_accumulation.compiled_count() - before <= 1
