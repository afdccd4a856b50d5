"""Sharded normalization (fuzz/engines/): `check --sharded` rejects every bug of tests/corpus/sharded/ at its
default budget and accepts every correct variant at 10x; a rank that raises, exits or hangs fails its cell
with a clear message within the timeout; the sharded built-ins conform.

Each pytest worker keeps its rank pools and its JAX mesh worker across tests (they are started once per
process), so only the first sharded test of a worker pays for starting them."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz import check
from fuzz.cli import check_parser, run_check
from fuzz.engines.cell import run_sharded_cell
from fuzz.engines.plan import DEFAULT_EXAMPLES, plan_sharded_cells
from fuzz.engines.split import MESHES, draw_split, pad_for_shard_map
from fuzz.engines.torch_ranks import TIMEOUT_VARIABLE
from fuzz.judge.draws import cases
from fuzz.run.subjects import SubjectSpec
from reference.magnitude import reference
from reference.tolerance import CONTRACT
from tests.corpus_entries import CORPUS, FUNCTION, corpus_entries

SHARDED_CORPUS = CORPUS / "sharded"
ENTRIES = corpus_entries(SHARDED_CORPUS)


def _check(path: Path, engine: str, *options: str):
    """`check PATH --sharded ENGINE ...`, its cells run in this process's workers (one: the tests already use
    every core)."""
    return run_check(check_parser().parse_args([f"{path}:{FUNCTION}", "--sharded", engine, "--jobs", "1", *options]))


def test_the_sharded_corpus_has_every_bug_class():
    names = {path.stem for path, _ in ENTRIES}
    assert {"torch_ratio_averaged_over_data_ranks", "torch_counts_from_local_slice", "torch_all_reduce_avg",
            "torch_missing_sequence_reduction", "torch_non_differentiable_all_reduce",
            "torch_reduce_sums_and_counts_separately", "torch_ratio_terms_in_one_tensor"} <= names
    assert {meta["FRAMEWORK"] for _, meta in ENTRIES if meta["EXPECT"] == "reject"} == {"torch", "jax"}


def _param(path: Path, meta: dict[str, str]):
    return pytest.param(path, meta, id=path.stem, marks=[pytest.mark.long] if meta["EXPECT"] == "accept" else [])


@pytest.mark.parametrize(("path", "meta"), [_param(path, meta) for path, meta in ENTRIES])
def test_check_sharded_tells_bugs_from_correct_code(path, meta, tmp_path):
    engine, expect = meta["FRAMEWORK"], meta["EXPECT"]
    if expect == "reject":
        cells = _check(path, engine, "--fail-fast")
        failing = [cell for cell in cells if not cell.ok]
        assert failing, f"{path.name}: no counterexample at the default budget"
        # its forward cells run first (one worker, in plan order), the gradient cells after them
        assert "gradients" not in failing[0].check, f"{path.name}: found by its gradients only"
        snippet = failing[0].snippet
        assert "torch.multiprocessing.spawn" in snippet if engine == "torch" else "jax.shard_map" in snippet
        # The snippet launches its own ranks and fails while the bug is there.
        script = tmp_path / "snippet.py"
        script.write_text(snippet)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                             cwd=tmp_path)
        assert run.returncode != 0 and "AssertionError" in run.stderr, run.stderr[-2000:]
    elif expect == "accept":  # 10x the default budget, forward and gradients
        cells = _check(path, engine, "--gradients", "--max-examples", str(10 * DEFAULT_EXAMPLES))
        failures = [(c.dtype, c.check, c.failures, c.traceback) for c in cells if not c.ok]
        assert not failures, f"{path.name} is correct but was rejected: {failures}"
        assert len(cells) == 2 * len(MESHES) * 4
    elif expect == "reject-gradients":
        cells = _check(path, engine, "--gradients", "--fail-fast")
        forward = [cell for cell in cells if "gradients" not in cell.check]
        assert len(forward) == len(MESHES) * 4 and all(cell.ok for cell in forward)
        assert any("gradients" in cell.check and not cell.ok for cell in cells), f"{path.name}: not found"
    else:
        pytest.fail(f"{path.name}: unknown EXPECT {expect!r}")


def _rank_bug(tmp_path: Path, body: str) -> Path:
    """A per-rank function that is the canonical one except for `body`, run first on rank 1."""
    path = tmp_path / "rank_bug.py"
    path.write_text(textwrap.dedent("""
        import os
        import time

        import torch.distributed as dist

        from impls.torch_distributed import sequence_vs_token_normalization


        def loss_normalization(token_log_probs, advantages, token_mask, *, data_group, sequence_group):
            if dist.get_rank() == 1:
        {body}
            return sequence_vs_token_normalization(token_log_probs, advantages, token_mask,
                                                   data_group=data_group, sequence_group=sequence_group)
        """).format(body=textwrap.indent(body, " " * 8)))
    return path


@pytest.mark.parametrize(("body", "message"), [
    ("raise ValueError('rank 1 is broken')", "ValueError: rank 1 is broken"),
    ("os._exit(7)", "died during an example (exit code 7"),
    ("time.sleep(3600)", "did not answer within 5 s during an example: it hangs"),
], ids=["raises", "exits", "hangs"])
def test_a_rank_that_fails_fails_its_cell_with_a_clear_message(tmp_path, monkeypatch, body, message):
    monkeypatch.setenv(TIMEOUT_VARIABLE, "5")
    target = f"{_rank_bug(tmp_path, body)}:{FUNCTION}"
    started = time.perf_counter()
    tasks = plan_sharded_cells(SubjectSpec(target, "torch"), "torch", ["float32"], ["cpu"], 5, 0, False, 1)
    cell = run_sharded_cell(next(task for task in tasks if task.mesh == (1, 2)))
    assert not cell.ok
    assert any(message in failure for failure in cell.failures), cell.failures
    assert time.perf_counter() - started < 90  # ranks start in seconds; one timeout of 5 s, not one per shrink


def test_a_torch_ranks_gradient_exception_is_named_backward(tmp_path, monkeypatch):
    """On torch ranks the function is not called alone to tell its forward's exception apart (one rank's call
    could wait on collectives the others do not make): a gradient cell's exception is named the backward's."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "5")
    path = _rank_bug(tmp_path, "raise ValueError('rank 1 is broken')")
    tasks = plan_sharded_cells(SubjectSpec(f"{path}:{FUNCTION}", "torch"), "torch", ["float32"], ["cpu"], 2, 0, True,
                               2)
    cell = run_sharded_cell(next(task for task in tasks if task.mesh == (1, 2) and task.check.endswith("gradients")))
    assert any("backward raised ValueError: rank 1 is broken" in failure for failure in cell.failures), cell.failures


def test_a_mesh_functions_exception_is_named_by_the_pass_that_raised_it(tmp_path, monkeypatch):
    """Under jax.shard_map a gradient cell runs forward and backward as one program: what tracing the function
    raised is the forward cell's bug, named the same; what only its backward raised is a backward bug."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    path = tmp_path / "jax_mesh_bugs.py"
    path.write_text(textwrap.dedent("""
        import jax
        import jax.numpy as jnp

        from impls.jax_shard_map import sequence_vs_token_normalization


        @jax.custom_vjp
        def same(values):
            return values


        def _forward(values):
            return values, None


        def _backward(saved, cotangent):
            raise ValueError("the backward is broken")


        same.defvjp(_forward, _backward)


        def forward_bug(token_log_probs, advantages, token_mask):
            raise ValueError("the forward is broken")


        jitted_forward_bug = jax.jit(forward_bug)  # a JAX user's loss is often jitted: its trace still raises it


        def backward_bug(token_log_probs, advantages, token_mask):
            return sequence_vs_token_normalization(same(token_log_probs), advantages, token_mask)
        """))
    kinds = {}
    for name in ("forward_bug", "jitted_forward_bug", "backward_bug"):
        tasks = plan_sharded_cells(SubjectSpec(f"{path}:{name}", "jax"), "jax", ["float32"], ["cpu"], 2, 0, True, 2)
        cell = run_sharded_cell(next(task for task in tasks if task.check.endswith("gradients")))
        kinds[name] = {bug.kind for bug in cell.bugs}
    assert kinds == {"forward_bug": {"raised ValueError"}, "jitted_forward_bug": {"raised ValueError"},
                     "backward_bug": {"backward raised ValueError"}}


def test_each_mesh_draws_its_own_cases():
    """Every (seed, mesh) has a seed of its own: the meshes of a run draw different cases, and two runs with
    different --seed share none of their cells' cases."""
    seeds = [task.seed for seed in range(3) for task in plan_sharded_cells(
        SubjectSpec("t.py:f", "torch"), "torch", ["float32"], ["cpu"], 3, seed, False, 1)]
    assert len(seeds) == 3 * len(MESHES) == len(set(seeds))


@pytest.mark.long
def test_the_sharded_builtins_conform():
    """The campaign's sharded rows: torch-distributed and jax-shard-map (the magnitude's and the accumulation's
    shard_map form), torch-ddp on real ranks, and jax-jit with sharded inputs."""
    from fuzz.cli import campaign_plan, parse
    from fuzz.run.workers import run_cells

    plan = campaign_plan(parse(["--implementations", "torch-distributed,jax-shard-map,torch-ddp,jax-jit"]))
    sharded = [task for task in plan.tasks if task.engine not in (None, "accumulation")]  # not in-process ones
    assert {task.subject.name for task in sharded} == {"torch-distributed", "jax-shard-map", "torch-ddp", "jax-jit"}
    cells = run_cells(sharded, jobs=1)
    failures = [(c.subject, c.check, c.dtype, c.failures) for c in cells if not c.ok]
    assert not failures
    rows = {(c.subject, c.check) for c in cells}
    assert ("torch-distributed", "sharded 2x2 gradients") in rows and ("jax-jit", "sharded inputs 1x4") in rows


@settings(max_examples=60, deadline=None)
@given(st.data(), cases(dtypes=["float32"]))
def test_splits_cover_the_batch_and_padding_changes_nothing(data, case):
    case, split = draw_split(lambda strategy, label: data.draw(strategy, label=label), case, MESHES)
    batch, tokens = case.shape
    assert split.row_cuts[0] == 0 and split.row_cuts[-1] == batch and list(split.row_cuts) == sorted(split.row_cuts)
    assert split.token_cuts[-1] == tokens and list(split.token_cuts) == sorted(split.token_cuts)
    padded = pad_for_shard_map(case, split)
    rows, columns = padded.case.shape
    assert rows % split.data == 0 and columns % split.sequence == 0
    exact, padded_exact = (reference(c.token_log_probs, c.advantages, c.token_mask) for c in (case, padded.case))
    assert np.array_equal(padded_exact.sequence_summed[padded.row_index], exact.sequence_summed)
    assert padded_exact.magnitude_ratio == exact.magnitude_ratio


def _run_fuzz(*args: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "fuzz", *args], cwd=root, capture_output=True, text=True,
                          timeout=600)


def test_check_sharded_exit_codes():
    assert _run_fuzz("check", "no/such/file.py:f", "--sharded", "torch").returncode == 2
    assert _run_fuzz("check", "impls.torch_distributed:sequence_vs_token_normalization").returncode == 2  # no engine
    both = _run_fuzz("check", "impls.jax_shard_map:sequence_vs_token_normalization", "--sharded", "jax",
                     "--framework", "jax")
    assert both.returncode == 2 and "argument --framework: not allowed with argument --sharded" in both.stderr
    # a single-process function has no data_group and sequence_group for the ranks to pass: refused before fuzzing
    single = _run_fuzz("check", "impls.torch_eager:sequence_vs_token_normalization", "--sharded", "torch")
    assert single.returncode == 2, single.stderr[-2000:]
    assert "cannot be called as its ranks call it" in single.stderr and "data_group" in single.stderr
    assert "FAIL" not in single.stdout
    target = f"{SHARDED_CORPUS / 'torch_missing_sequence_reduction.py'}:{FUNCTION}"
    bug = _run_fuzz("check", target, "--sharded", "torch", "--dtypes", "float32", "--fail-fast", "--no-gradients")
    assert bug.returncode == 1, bug.stderr[-2000:]
    # the bug itself, not a cell that timed out or whose ranks hung (those exit 1 too)
    assert "FAIL" in bug.stdout and "replicas disagree" in bug.stdout, bug.stdout[-3000:]
    assert "timed out" not in bug.stdout and "died or hung" not in bug.stdout, bug.stdout[-3000:]
    # the snippet is printed, or written to a file where its inputs are too large to print
    written = re.search(r"written to (\S+\.py)", bug.stdout)
    snippet = Path(written.group(1)).read_text() if written else bug.stdout
    assert "torch.multiprocessing.spawn(run_rank" in snippet


def test_the_judge_wants_replicas_to_agree_and_sums_replicated_advantage_gradients():
    """Without processes: replies as two sequence ranks would send them."""
    from fuzz.engines.judge import gather_forward, gather_gradients, summed_over_replicas
    from fuzz.engines.split import Split
    from reference.case import Case

    case = Case(np.array([[-1.0, -2.0, -4.0], [-3.0, -4.0, -1.0]]), np.array([2.0, -1.0]), np.ones((2, 3), bool))
    split = Split(1, 2, (0, 2), (0, 1, 3))
    exact = reference(case.token_log_probs, case.advantages, case.token_mask)
    right = {key: np.asarray(value) for key, value in exact.outputs().items()}
    dtypes = dict.fromkeys(right, "float32")
    replies = [{"failures": [], "outputs": right, "dtypes": dtypes},
               {"failures": [], "outputs": {**right, "token_averaged": right["token_averaged"] + [0.0, 1.0]},
                "dtypes": dtypes}]
    verdict = gather_forward(case, split, replies, split.describe, CONTRACT)
    assert any(failure.kind == "replicas disagree" and failure.message.startswith(
        "replicas disagree: token_averaged[1]") for failure in verdict.failures)
    assert not any("rounding it its own way" in failure.message for failure in verdict.failures)  # not a rounding
    # 1 ulp of float32 apart: the same value rounded its own way on each rank, and the report says how that happens
    ratio = np.float32(right["magnitude_ratio"])
    first, rounded = ({**right, "magnitude_ratio": np.asarray(value, dtype=np.float64)}
                      for value in (ratio, np.nextafter(ratio, np.float32(np.inf))))
    apart = gather_forward(case, split, [{**replies[0], "outputs": first}, {**replies[0], "outputs": rounded}],
                           split.describe, CONTRACT)
    assert [failure.message for failure in apart.failures if failure.kind == "replicas disagree"] == [
        f"replicas disagree: magnitude_ratio is {float(ratio)!r} on {split.describe(0)} and "
        f"{float(rounded['magnitude_ratio'])!r} on {split.describe(1)} (a replicated output must be the same on every "
        "replica): 1 ulp of float32 apart, each rank rounding it its own way (a value rebuilt from a rank's own part, "
        "as local + (total - local).detach(), rounds differently on each rank: return the all-reduced value itself)"]
    assert gather_forward(case, split, [replies[0], replies[0]], split.describe, CONTRACT).ok

    assert summed_over_replicas(case, {"sequence_summed": np.ones(2), "token_averaged": np.ones(2),
                                       "magnitude_ratio": np.array(1.0)}, split)["magnitude_ratio"] == 2
    gradients = [{"failures": [], "gradients": {"d token_log_probs": np.full((2, columns), rank + 1.0),
                                                "d advantages": np.array([1.0, 2.0]) * (rank + 1)}}
                 for rank, columns in enumerate((1, 2))]
    gathered, verdict = gather_gradients(case, split, gradients, split.describe)
    assert verdict.ok
    assert gathered["d token_log_probs"].tolist() == [[1.0, 2.0, 2.0], [1.0, 2.0, 2.0]]
    assert gathered["d advantages"].tolist() == [3.0, 6.0]  # the replicas' shares add up


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_the_jax_mesh_gets_its_inputs_from_the_host_without_compiling_a_slice(dtype):
    """The JAX mesh worker puts a case's inputs on its shards from NumPy: an array put on one device first is
    then sliced for the shards by a program XLA compiles for each new shape (a few seconds per campaign)."""
    pytest.importorskip("jax")
    import jax
    import jax.monitoring
    from jax.sharding import Mesh

    from fuzz.engines.jax_worker import sharded_inputs
    from impls.frameworks import load_framework
    from reference.case import Case

    adapter = load_framework("jax")
    if len(jax.devices("cpu")) < 2:
        pytest.skip("one CPU device: JAX started before prepare_process")
    rng = np.random.default_rng(5)  # small integers: exact in every dtype; a shape no other test puts on a mesh
    case = Case(rng.integers(-8, 8, (6, 13)).astype(np.float64), rng.integers(-3, 4, 6).astype(np.float64),
                rng.random((6, 13)) < 0.5, dtype=dtype)
    mesh = Mesh(np.array(jax.devices("cpu")[:2]).reshape(2, 1), ("data", "sequence"))
    compiles = []

    def count_compiles(event: str, duration: float, **_: object) -> None:
        if event.endswith("backend_compile_duration"):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(count_compiles)
    try:  # the listener lives in JAX for the whole process: only this test's puts are counted
        with adapter.scope(case):
            inputs = sharded_inputs(adapter, case, mesh)
            values = [adapter.to_float64(value) for value in inputs]
    finally:
        jax.monitoring.unregister_event_duration_listener(count_compiles)
    assert compiles == []
    for value, spec in zip(values, case.contract.inputs):
        assert np.array_equal(value, case.values[spec.name].astype(np.float64))
    assert {shard.device for shard in inputs[0].addressable_shards} == set(jax.devices("cpu")[:2])


TORCH_TOKEN_MEAN = '''
import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

warnings.filterwarnings("ignore", message=".*torch.distributed.nn.*")  # deprecated in torch 2.13, still shipped


def _summed(value, group):
    return dist_nn.all_reduce(value, group=group)  # differentiable: the backward all-reduces the gradient


def loss_normalization(token_losses, token_mask, *, data_group, sequence_group):
    acc = torch.promote_types(token_losses.dtype, torch.float32)
    total = torch.where(token_mask, token_losses.to(acc), 0.0).sum()
    count = token_mask.sum().to(torch.float64)
    {body}
'''
# the global sum over the global count; the same count folded into one scalar per rank; each rank's own mean,
# averaged over the ranks
TORCH_RIGHT = '''for group in (data_group, sequence_group):
        total, count = _summed(total, group), _summed(count, group)
    return torch.where(count > 0, total / count.clamp(min=1).to(acc), total * 0)'''
TORCH_PLAIN_ALL_REDUCE = '''both = torch.stack([total, count.to(acc)])
    dist.all_reduce(both)  # invisible to autograd: each rank's gradient is its own share
    return torch.where(both[1] > 0, both[0] / both[1].clamp(min=1), both[0] * 0)'''
TORCH_COUNT_AVERAGED = '''total = dist_nn.all_reduce(total)
    count = dist_nn.all_reduce(count) / dist.get_world_size()
    return torch.where(count > 0, total / count.clamp(min=1).to(acc), total * 0)'''
TORCH_MEAN_OF_MEANS = '''local = torch.where(count > 0, total / count.clamp(min=1).to(acc), total * 0)
    for group in (data_group, sequence_group):
        local = _summed(local, group) / dist.get_world_size(group)
    return local'''

JAX_SEQUENCE_MEAN = '''
import jax
import jax.numpy as jnp


def loss_normalization(token_losses, token_mask):
    """seq-mean-token-mean over data x sequence shards: row sums and counts psum'd over the sequence axis, the rows'
    means psum'd over the data axis, divided by {divisor}."""
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    sums = jax.lax.psum(jnp.where(token_mask, token_losses.astype(acc), 0).sum(axis=1), "sequence")
    counts = jax.lax.psum(token_mask.sum(axis=1), "sequence")
    means = jnp.where(counts > 0, sums / jnp.maximum(counts, 1).astype(acc), 0)
    rows = jax.lax.psum({rows}, "data")
    return jax.lax.psum(means.sum(), "data") / jnp.maximum(rows, 1).astype(acc)
'''


def test_a_per_rank_reduction_is_checked_on_torch_meshes_and_a_mean_of_rank_means_is_named(tmp_path):
    """`check --sharded torch --reduction MODE`: a per-rank loss reduction (the reduction contract's inputs split
    over data x sequence ranks, the loss replicated) conforms when it all-reduces the sums and counts, and is
    rejected, named as what it is, when it averages each rank's own mean."""
    right, wrong = tmp_path / "right.py", tmp_path / "mean_of_means.py"
    right.write_text(TORCH_TOKEN_MEAN.format(body=TORCH_RIGHT))
    wrong.write_text(TORCH_TOKEN_MEAN.format(body=TORCH_MEAN_OF_MEANS))
    cells = _check(right, "torch", "--reduction", "token-mean", "--dtypes", "float64")
    assert cells and all(cell.ok for cell in cells), [cell.failures for cell in cells if not cell.ok]
    with pytest.raises(TypeError, match="is a loss reduction: declare its mode"):  # --reduction forgotten
        check(f"{right}:{FUNCTION}", sharded="torch")
    cells = _check(wrong, "torch", "--reduction", "token-mean", "--dtypes", "float32", "--no-gradients")
    failures = [failure for cell in cells for failure in cell.failures]
    assert failures and any("a mean of per-rank means" in failure for failure in failures), failures
    # a collective autograd does not see, and a count averaged where it must be summed: named as what they are
    for name, body, phrase in (("plain", TORCH_PLAIN_ALL_REDUCE, "the all-reduce carries no gradient back"),
                               ("averaged", TORCH_COUNT_AVERAGED, "a count all-reduced with AVG where SUM is needed")):
        other = tmp_path / f"{name}.py"
        other.write_text(TORCH_TOKEN_MEAN.format(body=body))
        cells = _check(other, "torch", "--reduction", "token-mean", "--dtypes", "float32", "--fail-fast")
        failures = [failure for cell in cells for failure in cell.failures]
        assert failures and any(phrase in failure for failure in failures), failures
    # the Python API's form of the same check (`sharded=` for `--sharded`), as a pytest file of the user's calls it
    report = check(f"{wrong}:{FUNCTION}", sharded="torch", reduction="token-mean", dtypes=["float32"],
                   gradients=False, fail_fast=True)
    assert not report.ok and "a mean of per-rank means" in report.failures[0].message, report.failures


def test_a_per_shard_reduction_counting_every_row_is_judged_on_the_batch_shard_map_is_given(tmp_path):
    """shard_map needs equal shards, and the engine pads uneven ones with fully masked rows. Where D counts every
    row (rows="all"), a per-shard body cannot tell those from the batch's own empty rows: the padded batch it is
    given is the batch it is judged on, so correct code conforms; one that counts the padding where only the rows
    with tokens count (rows="nonempty") is named so."""
    pytest.importorskip("jax")
    every_row = tmp_path / "every_row.py"
    every_row.write_text(JAX_SEQUENCE_MEAN.format(divisor="the global row count", rows="token_mask.shape[0]"))
    cells = _check(every_row, "jax", "--reduction", "seq-mean-token-mean", "--rows", "all", "--dtypes", "float32")
    assert cells and all(cell.ok for cell in cells), [cell.failures for cell in cells if not cell.ok]
    cells = _check(every_row, "jax", "--reduction", "seq-mean-token-mean", "--rows", "nonempty", "--dtypes",
                   "float64", "--no-gradients", "--fail-fast")
    failures = [failure for cell in cells for failure in cell.failures]
    assert failures and any("on the batch shard_map is given, padded to" in failure and "rows=all" in failure
                            for failure in failures), failures
    # D of each shard's own rows, the shards' losses summed: named on the shards of the padded batch judged
    shard_rows = tmp_path / "shard_rows.py"
    shard_rows.write_text(JAX_SEQUENCE_MEAN.format(divisor="the shard's own rows", rows="token_mask.shape[0]").replace(
        'jax.lax.psum(token_mask.shape[0], "data")', "token_mask.shape[0]"))
    cells = _check(shard_rows, "jax", "--reduction", "seq-mean-token-mean", "--rows", "all", "--dtypes", "float64",
                   "--no-gradients", "--fail-fast")
    failures = [failure for cell in cells for failure in cell.failures]
    assert failures and any("ranks (a local loss all-reduced with SUM)" in failure for failure in failures), failures


JAX_MASK_MULTIPLIED = '''
import jax
import jax.numpy as jnp


def loss_normalization(token_losses, token_mask):
    """token-mean with the mask multiplied in (in bfloat16 XLA on CPU keeps the product: 0 * NaN is NaN)."""
    acc = jnp.promote_types(token_losses.dtype, jnp.float32)
    total, count = jax.lax.psum(((token_losses * token_mask).astype(acc).sum(), token_mask.sum(dtype=acc)),
                                ("data", "sequence"))
    return total / jnp.maximum(count, 1)
'''


def test_shard_maps_padding_is_finite_where_the_code_declares_its_padding_finite(tmp_path):
    """The masked tokens that pad uneven shards hold what the declared domain allows: NaN by default, which code
    that multiplies by the mask turns into a NaN loss (named as that, on the padded batch it was given), and 0
    under --masked-values finite, where the same code conforms."""
    pytest.importorskip("jax")
    multiplied = tmp_path / "multiplied.py"
    multiplied.write_text(JAX_MASK_MULTIPLIED)
    cells = _check(multiplied, "jax", "--reduction", "token-mean", "--dtypes", "bfloat16", "--masked-values",
                   "finite")
    assert cells and all(cell.ok for cell in cells), [cell.failures for cell in cells if not cell.ok]
    cells = _check(multiplied, "jax", "--reduction", "token-mean", "--dtypes", "bfloat16", "--no-gradients",
                   "--fail-fast")
    failures = [failure for cell in cells for failure in cell.failures]
    assert any("not finite" in failure and "masked-out token_losses hold nan: multiplied by the mask" in failure
               for failure in failures), failures
