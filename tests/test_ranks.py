"""`check --accumulation --ranks`: a per-chunk loss on real torch.distributed ranks under DDP. A rank that
raises, dies or hangs fails its cell with a message saying so, within the rank timeout, as the sharded check's
ranks do; the suite itself never hangs or crashes. On both rank engines (DDP, jax.shard_map), a rank form edited
between two checks of one process is judged as it is after the edit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fuzz.engines.cell import run_sharded_cell
from fuzz.engines.plan import plan_sharded_cells
from fuzz.engines.torch_ranks import TIMEOUT_VARIABLE
from fuzz.run.subjects import SubjectSpec, declared_contract

ROOT = Path(__file__).resolve().parents[1]


def _rank_bug(tmp_path, body: str) -> str:
    path = tmp_path / "rank_bug.py"
    path.write_text(textwrap.dedent("""
        import os
        import time

        import torch.distributed as dist

        from impls.torch_eager_accumulation import chunk_loss_on_ranks


        def chunk_loss(token_losses, token_mask, *, step_masks, group, accumulation_steps):
            if dist.get_rank() == 1:
        {body}
            return chunk_loss_on_ranks(token_losses, token_mask, step_masks=step_masks, group=group,
                                       accumulation_steps=accumulation_steps)
        """).format(body=textwrap.indent(body, " " * 8)))
    return f"{path}:chunk_loss"


def rank_cell(target: str, framework: str, engine: str, check: str = "forward"):
    """The R = 2, G = 1 forward (or gradients) cell of a token-mean rank form `target` on `engine`, run (5
    examples)."""
    contract, parameters = declared_contract("token-mean", accumulation=True)
    spec = SubjectSpec.of(target, framework, contract=contract, parameters=parameters)
    tasks = plan_sharded_cells(spec, engine, ["float32"], ["cpu"], 5, 0, check == "gradients", 5)
    return run_sharded_cell(next(task for task in tasks if task.mesh == (2, 1) and check in task.check))


@pytest.mark.parametrize(("body", "message"), [
    ("raise ValueError('rank 1 is broken')", "ValueError: rank 1 is broken"),
    ("os._exit(7)", "died during an example (exit code 7"),
    ("time.sleep(3600)", "did not answer within 10 s during an example: it hangs"),
], ids=["raises", "exits", "hangs"])
def test_a_rank_that_fails_fails_its_cell_with_a_clear_message(tmp_path, monkeypatch, body, message):
    monkeypatch.setenv(TIMEOUT_VARIABLE, "10")
    started = time.perf_counter()
    cell = rank_cell(_rank_bug(tmp_path, body), "torch", "ddp")
    assert not cell.ok
    assert any(message in failure for failure in cell.failures), cell.failures
    assert time.perf_counter() - started < 90  # ranks start in seconds; one timeout of 10 s, not one per shrink


def test_a_rank_that_raises_while_the_others_wait_for_it_fails_at_once_as_it_raised(tmp_path, monkeypatch):
    """Rank 1 raises; rank 0 waits for it in the step's all-reduce, which never completes. The example has failed
    already: a few seconds later the cell reports rank 1's exception as its bug (the kind a split with one rank
    shows, so it is one bug over the splits), and that rank 0 waited, without waiting out the rank deadline."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    started = time.perf_counter()
    cell = rank_cell(_rank_bug(tmp_path, "raise ValueError('rank 1 is broken')"), "torch", "ddp")
    assert [bug.kind for bug in cell.bugs] == ["raised ValueError"]
    assert cell.bugs[0].failures[0].startswith("rank 1: ") and "ValueError: rank 1 is broken" in cell.bugs[0].traceback
    assert "rank 0 did not answer within 3 s after rank 1 raised" in cell.bugs[0].failures[1]
    assert time.perf_counter() - started < 45  # not the 60 s deadline


@pytest.mark.parametrize(("check", "body", "kind", "said"), [
    ("gradients", "return chunk_loss_on_ranks(token_losses, token_mask, step_masks=step_masks, group=group,\n"
                  "                           accumulation_steps=accumulation_steps).detach()",
     "no gradient", "its loss carries no gradient"),
    ("forward", "return 'a loss'", "wrong output structure", " str"),
], ids=["loss-without-gradient", "not-a-loss"])
def test_a_rank_whose_step_stops_on_a_failure_while_the_others_wait_for_it_fails_at_once(tmp_path, monkeypatch, check,
                                                                                         body, kind, said):
    """Rank 1's step stops on the suite's own finding, not on an exception: a loss without a gradient runs no
    backward, so rank 0 waits in DDP's all-reduce of the gradients; a loss that is no tensor ends the step before
    the rank form's all-reduce of the counts, where rank 0 waits. The example has failed already: a few seconds
    later the cell reports rank 1's failure, the kind a split with one rank shows (one bug over the splits, as a
    fresh constant returned for an empty micro-batch is), without waiting out the rank deadline once per cell."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    started = time.perf_counter()
    cell = rank_cell(_rank_bug(tmp_path, body), "torch", "ddp", check)
    assert [bug.kind for bug in cell.bugs] == [kind], cell.failures
    assert cell.bugs[0].failures[0].startswith("rank 1: ") and said in cell.bugs[0].failures[0], cell.failures
    assert "rank 0 did not answer within 3 s after rank 1 stopped on its failure" in cell.bugs[0].failures[1]
    assert time.perf_counter() - started < 45  # not the 60 s deadline


@pytest.mark.parametrize(("framework", "engine", "target", "starts"), [
    ("torch", "ddp", None, 2),  # the ranks' one retry, on a new port
    ("jax", "jax-accumulation", "impls.jax_jit_accumulation:chunk_loss_on_shards", 1),
])
def test_processes_that_do_not_start_end_the_cell_at_once_as_the_harnesss_failure(tmp_path, monkeypatch, framework,
                                                                                    engine, target, starts):
    """Rank processes that cannot start (here: a time limit too short for any start) are the harness's failure,
    raised as a RuntimeError that says why: Hypothesis does not shrink it, which would start them again for every
    example it tries, each start with its own time limit."""
    from fuzz.engines import jax_worker, torch_ranks

    module, cls = (torch_ranks, torch_ranks.RankPool) if framework == "torch" else (jax_worker, jax_worker.JaxWorker)
    started = []
    receive = cls._start if framework == "torch" else cls._receive
    monkeypatch.setattr(cls, receive.__name__, lambda self, *args: (started.append(args), receive(self, *args))[1])
    monkeypatch.setattr(module, "START_TIMEOUT_S", 0.001)
    torch_ranks.close_pools()
    jax_worker.close_worker()
    with pytest.raises(RuntimeError, match=r"did not start: .*did not start within 0.001 s: .* at module level"):
        rank_cell(target or _rank_bug(tmp_path, "pass"), framework, engine)
    assert len(started) == starts, started


@pytest.mark.parametrize(("framework", "engine", "form"), [
    ("torch", "ddp", "impls.torch_eager_accumulation import chunk_loss_on_ranks as chunk_loss"),
    ("jax", "jax-accumulation", "impls.jax_jit_accumulation import chunk_loss_on_shards as chunk_loss"),
])
def test_a_rank_form_edited_between_two_checks_is_judged_as_it_is_now(tmp_path, monkeypatch, framework, engine,
                                                                        form):
    """Rank processes outlive a check (a pytest session, a notebook): after the file is fixed, the next check in the
    same process judges the fixed function, not the one the ranks loaded before (a false alarm on correct code)."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    path = tmp_path / "edited_rank_form.py"
    path.write_text(f"from {form}\n\n\ndef loss(*args, **keywords):\n    raise ValueError('not written yet')\n")
    assert [bug.kind for bug in rank_cell(f"{path}:loss", framework, engine).bugs] == ["raised ValueError"]
    path.write_text(f"from {form}\n\nloss = chunk_loss\n")
    assert rank_cell(f"{path}:loss", framework, engine).ok


@pytest.mark.parametrize(("framework", "engine", "form"), [
    ("torch", "ddp", "impls.torch_eager_accumulation import chunk_loss_on_ranks as chunk_loss"),
    ("jax", "jax-accumulation", "impls.jax_jit_accumulation import chunk_loss_on_shards as chunk_loss"),
])
def test_a_module_the_rank_form_imports_edited_between_two_checks_is_judged_as_it_is_now(tmp_path, monkeypatch,
                                                                                       framework, engine, form):
    """The rank form is unchanged; the helper module beside it that scales its loss is fixed between two checks:
    the ranks, which imported the helper once, are replaced, and the second check passes."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    helper = tmp_path / f"scale_{framework}.py"
    helper.write_text("FACTOR = 2  # the bug\n")
    path = tmp_path / f"scaled_rank_form_{framework}.py"
    path.write_text(f"from {form}\nfrom scale_{framework} import FACTOR\n\n\n"
                    "def loss(*args, **keywords):\n    return FACTOR * chunk_loss(*args, **keywords)\n")
    assert [bug.kind for bug in rank_cell(f"{path}:loss", framework, engine).bugs] == ["loss out of tolerance"]
    helper.write_text("FACTOR = 1\n")
    assert rank_cell(f"{path}:loss", framework, engine).ok


@pytest.mark.parametrize(("framework", "engine", "name", "form"), [
    ("torch", "ddp", "loss", "impls.torch_eager_accumulation import chunk_loss_on_ranks as form"),
    ("torch", "ddp", "step", "impls.torch_eager_accumulation import chunk_loss_on_ranks as form"),
    ("jax", "jax-accumulation", "call", "impls.jax_jit_accumulation import chunk_loss_on_shards as form"),
    ("jax", "jax-accumulation", "forward", "impls.jax_jit_accumulation import chunk_loss_on_shards as form"),
])
def test_a_rank_forms_snippets_reproduce_its_bug_whatever_it_is_named(tmp_path, monkeypatch, framework, engine, name,
                                                                      form):
    """The forward and gradient snippets of a rank form named as a snippet might name its own variables (`loss`,
    `call`) or names them (`step`, `forward`: it is imported under a name of its own there) run on their own, fail
    on the bug (AssertionError) and fit 100 columns."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "60")
    path = tmp_path / "doubled_rank_form.py"
    path.write_text(f"from {form}\n\n\ndef {name}(*args, **keywords):\n    return 2 * form(*args, **keywords)\n")
    contract, parameters = declared_contract("token-mean", accumulation=True)
    spec = SubjectSpec.of(f"{path}:{name}", framework, contract=contract, parameters=parameters)
    tasks = plan_sharded_cells(spec, engine, ["float32"], ["cpu"], 5, 0, True, 1)
    for check in ("forward", "gradients"):
        cell = run_sharded_cell(next(task for task in tasks if task.mesh == (2, 1) and task.check == check))
        assert not cell.ok and cell.snippet and max(map(len, cell.snippet.splitlines())) <= 100, cell.snippet
        script = tmp_path / f"snippet_{check}.py"
        script.write_text(cell.snippet)
        replay = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                                cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert replay.returncode != 0 and "AssertionError" in replay.stderr, replay.stderr[-3000:]
        # the doubled loss itself, not a snippet that calls one of its own objects in the rank form's place
        found = "AssertionError: combined" in replay.stderr or "gradient is wrong" in replay.stderr
        assert found, replay.stderr[-3000:]


def test_the_snippet_of_a_rank_form_passed_as_a_function_runs_from_any_folder(tmp_path):
    """The Python API loads a function object on the ranks by its module's name (its folder is on the test's path);
    its snippet rebuilds it from its file, so it reproduces the bug from any folder, as a TARGET's does."""
    trainer, elsewhere = tmp_path / "trainer", tmp_path / "elsewhere"
    trainer.mkdir()
    elsewhere.mkdir()
    (trainer / "ddp_losses.py").write_text(
        "from impls.torch_eager_accumulation import chunk_loss_on_ranks\n\n\n"
        "def step(*args, **keywords):\n    return 2 * chunk_loss_on_ranks(*args, **keywords)\n")
    (trainer / "check_it.py").write_text(textwrap.dedent("""
        import sys
        from fuzz import check
        import ddp_losses

        if __name__ == "__main__":
            report = check(ddp_losses.step, framework="torch", reduction="token-mean", accumulation=True, ranks=True,
                           dtypes=["float32"], max_examples=3, gradients=False, fail_fast=True)
            open(sys.argv[1], "w").write(report.failures[0].snippet)
        """))
    snippet = elsewhere / "snippet.py"
    environment = {**os.environ, "PYTHONPATH": str(ROOT), TIMEOUT_VARIABLE: "60"}
    found = subprocess.run([sys.executable, "check_it.py", str(snippet)], capture_output=True, text=True, timeout=300,
                           cwd=trainer, env=environment)
    assert found.returncode == 0 and snippet.exists(), found.stderr[-3000:]
    replay = subprocess.run([sys.executable, str(snippet)], capture_output=True, text=True, timeout=300,
                            cwd=elsewhere, env=environment)
    assert replay.returncode != 0 and "AssertionError: combined" in replay.stderr, replay.stderr[-3000:]
