"""The JAX rank engine of a per-chunk contract: a step's R x G chunks under `jax.shard_map` over R host CPU
devices (the mesh worker's, fuzz/engines/jax_worker.py), each device's G micro-batches in a `lax.scan`, the
gradients combined over the devices by the engine's own collective.

The rank form. Device r (of the mesh axis "data") calls, for each of its micro-batches g in order,

    fn(*its chunk's inputs, step_masks=..., axis_name="data", accumulation_steps=G) -> the chunk's output

with only its chunk's inputs (arrays of one micro-batch), `step_masks` the masks of all of its G micro-batches
(a list of arrays, as a trainer holds its mini-batch before the micro-batch loop), `axis_name` the data-parallel
mesh axis and `accumulation_steps` G (a Python int). The function computes the step's normalizers itself with
collectives over `axis_name` (`lax.psum` of its counts over `step_masks`, dp_size `lax.axis_size(axis_name)`) and
returns its chunk's output, a 0-d array. It is traced once, inside `jax.jit(jax.shard_map(...))`.

The engine. The step runs as one jitted shard_map: each device scans its G chunks; with cotangents each chunk's
backward is `jax.vjp` with the combined output's cotangent c times the chunk's weight (times R where the ranks'
gradients are averaged, as `lax.pmean` divides by R again), a device's gradients are summed over its chunks into
its gradient of the step's per-token values (a replicated parameter, as under DDP: nonzero at its own chunks), and
the devices' gradients are combined by `lax.pmean` (dp_reduce="mean") or `lax.psum` ("sum"): the engine's
collective, not the harness's. The chunks' outputs come back (each device's G of them), and the combined output
(weight times their sum) and every token's gradient are judged as the DDP engine judges them
(fuzz/engines/torch_ddp.py), against the exact result of the whole step.

Static shapes. shard_map runs one program on every device, and lax.scan one body on every chunk, so every chunk
has one shape, (rows, width):
- width: each chunk is padded with masked tokens (NaN per-token values, 0 where the subject declares its padding
  finite) to a width from a short menu, at least the step's. Sound by the contract: a masked token is ignored
  whatever it holds and counts for nothing, and L_max is the declared constant, never the width. The padded
  columns are not the step's: their gradients must be exactly 0, and are cut off before judging.
- rows: a fully masked row is not nothing under rows="all", which counts every row. So the rows a chunk lacks
  are added to the step itself when the split is drawn: every chunk gets `rows` rows (a size from a short menu,
  at least 1), its own first, then fully masked rows (per-token values 0) that are rows of the step, counted by
  the exact result as by the function. No row is padded behind the function's back, and no chunk is zero-size
  (XLA does not compile shard_map over zero-size operands only): an empty chunk is one of fully masked rows.
  The splits of fuzz/engines/chunks.py are drawn first and padded so; uneven rows across chunks become uneven
  selected tokens, as in a JAX trainer, whose micro-batches have one shape.
The menus keep the number of shapes, and so of XLA compilations, small.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuzz.engines.accumulation import EMPTY_CHUNK, Accumulation
from fuzz.engines.chunks import (
    BUCKET_ROWS,
    BUCKET_WIDTHS,
    ChunkSplit,
    chunk_weight,
    draw_chunks,
    explain_combined_gradient,
    judge_combined,
)
from fuzz.engines.jax_worker import JAX_MESH_PROCESS
from fuzz.engines.judge import PADDING_NOT_ZERO
from fuzz.engines.split import padded_size, padding_fill
from fuzz.judge.draws import Draw
from fuzz.judge.gradients import judge_gradients
from fuzz.judge.outputs import GRADIENT_STRUCTURE
from fuzz.judge.verdict import STRUCTURE, Failure, Verdict
from fuzz.report.texts import a_type_name
from reference.case import Case

AXIS = "data"  # the mesh worker's data axis: the data-parallel ranks
RANK_KEYWORDS = ("step_masks", "axis_name", "accumulation_steps")  # what each call takes besides its inputs
STATIC_KEYWORDS = ("axis_name", "accumulation_steps")  # Python values (a str, an int), never arrays


def static_hint(fn: Any, failure: Failure) -> str:
    """What to do where a rank form wrapped in `jax.jit` refused a Python keyword as an array (a bare `@jax.jit`
    traces every argument): the hint, or "" where that is not what failed."""
    jitted = hasattr(fn, "lower") and hasattr(fn, "__wrapped__")  # jax.jit's wrapper, whatever its class
    if not (jitted and failure.kind == "raised TypeError" and any(k in failure.message for k in STATIC_KEYWORDS)):
        return ""
    return (f"\nThe function is jitted, and {' and '.join(STATIC_KEYWORDS)} are a str and an int: mark them static "
            f"(jax.jit(fn, static_argnames={STATIC_KEYWORDS!r})), or leave fn unjitted: the step is compiled whole")


@dataclass(frozen=True)
class MeshChunks(ChunkSplit):
    """A split whose chunks have one number of rows (cuts every `rows`), every chunk the step's tokens (`widths`),
    padded to `width` under shard_map."""

    width: int = 0

    @property
    def rows_per_chunk(self) -> int:
        return self.cuts[1] - self.cuts[0]


def uniform_chunks(case: Case, split: ChunkSplit) -> tuple[Case, MeshChunks]:
    """The step with every chunk of `split` made the same number of rows: its own, then fully masked rows (values
    0, mask False) added to the step; and the split of that step."""
    sizes = [split.cuts[k + 1] - split.cuts[k] for k in range(split.chunks)]
    rows = padded_size(max(max(sizes), 1), BUCKET_ROWS)  # the largest chunk's (a step has at most 16)
    source = np.full(split.chunks * rows, -1, dtype=np.int64)  # the original row of each new row, -1 if added
    for k, size in enumerate(sizes):
        source[k * rows:k * rows + size] = np.arange(split.cuts[k], split.cuts[k + 1])
    real = source >= 0
    values = {}
    for spec in case.contract.inputs:
        old = case.values[spec.name]
        if "batch" not in spec.dims:
            continue
        axis = spec.dims.index("batch")
        shape = list(old.shape)
        shape[axis] = source.size
        new = np.full(shape, False if spec.kind == "bool" else 0.0, dtype=old.dtype)
        np.moveaxis(new, axis, 0)[real] = np.moveaxis(old, axis, 0)[source[real]]
        values[spec.name] = new
    padded = case.with_(**values)
    tokens = padded.shape[1]
    return padded, MeshChunks(split.ranks, split.steps, tuple(range(0, split.chunks * rows + 1, rows)),
                              (tokens,) * split.chunks, padded_size(tokens, BUCKET_WIDTHS))


class JaxAccumulation(Accumulation):
    name = "jax-accumulation"
    framework = "jax"
    kind = "shard_map ranks"
    runs_on = "jax.shard_map ranks"
    padded = True
    in_process = False
    compiles = True
    worker_setup = JAX_MESH_PROCESS
    campaign_examples = 6  # a new chunk shape compiles (XLA, ~0.5 s forward, ~1.5 s with the backward)

    def devices(self, spec: Any) -> list[str]:
        return ["cpu"]  # host devices: R of the mesh worker's

    def draw_split(self, draw: Draw, case: Case, shape: tuple[int, int]) -> tuple[Case, MeshChunks]:
        case, split = draw_chunks(draw, case, shape)
        return uniform_chunks(case, split)

    def fit(self, subject: Any, case: Case, split: MeshChunks) -> tuple[Case, MeshChunks]:
        return case, split  # draw_split made every chunk one shape of the menus already

    def telling_split(self, subject: Any, case: Case, chunks: ChunkSplit) -> tuple[Case, MeshChunks]:
        return uniform_chunks(case, chunks)

    def run(self, subject: Any, case: Case, split: MeshChunks, cotangents: dict[str, np.ndarray] | None,
            exact: Any) -> Verdict:
        from fuzz.engines.jax_worker import jax_worker

        contract = case.contract
        weight, name = chunk_weight(case, split), contract.outputs[0].name
        job: dict[str, Any] = {"runner": (__name__, "run_step"), "subject": subject.key, "case": case,
                               "split": split, "fill": padding_fill(subject.masked_values)}
        if cotangents is not None:  # lax.pmean divides by R again: each chunk's backward gets c * weight * R
            averaged = contract.chunked.ranks_averaged(contract.bound)
            job["cotangent"] = float(np.asarray(cotangents[name])) * weight * (split.ranks if averaged else 1.0)
        reply = jax_worker().run(job)
        verdict = Verdict(failures=list(reply["failures"]), traceback=reply.get("traceback"))
        if not verdict.ok:
            return verdict
        if cotangents is None:
            losses = reply["losses"]
            for k, value in enumerate(losses):
                if not case.mask[split.rows(k)].any() and value != 0:
                    verdict.fail(EMPTY_CHUNK, f"{split.describe(k)}: a chunk without a selected token gives "
                                              f"{name} {value!r}, expected exactly 0")
            combined = weight * float(np.sum(losses))
            verdict.merge(judge_combined(case, split, combined, reply["dtype"], subject.precision,
                                         [float(value) for value in losses], counts_its_own=True),
                          prefix=f"the combined {name}: ")
            return verdict
        gradient, tokens = reply["gradient"], case.shape[1]
        padding = gradient[:, :, tokens:]
        if not np.all(padding == 0):
            k = int(np.flatnonzero((padding != 0).any(axis=(1, 2)))[0])
            verdict.fail(PADDING_NOT_ZERO, f"{split.describe(k)}: the gradient at the masked tokens padding it to "
                                           f"width {split.width} under shard_map is not exactly 0")
        label = f"d {contract.differentiable_inputs[0].name}"
        step = gradient[:, :, :tokens].reshape(case.shape)
        verdict.merge(judge_gradients(case, {label: step}, exact, cotangents, subject.precision,
                                      explain_combined_gradient(case, split)))
        return verdict

    def snippet(self, subject: Any, case: Case, split: MeshChunks, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        from fuzz.engines.snippets import jax_accumulation_snippet

        return jax_accumulation_snippet(subject, case, split, cotangents, failures)


ENGINE = JaxAccumulation()


# ---------------------------------------------------------------------------------------------- worker side

def stacked(case: Case, split: MeshChunks, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """The step's per-token values and mask as (R * G, rows, width) chunks, chunk k = rank k // G's step k % G
    (rank-major, as shard_map splits the first axis over the devices), padded with masked `fill` tokens."""
    contract = case.contract
    values, mask = case.values[contract.differentiable_inputs[0].name], case.mask
    batch, tokens = case.shape
    padded_values = np.full((batch, split.width), fill, dtype=np.float64)
    padded_values[:, :tokens] = values
    padded_mask = np.zeros((batch, split.width), dtype=bool)
    padded_mask[:, :tokens] = mask
    shape = (split.chunks, split.rows_per_chunk, split.width)
    return padded_values.reshape(shape), padded_mask.reshape(shape)


def _output(contract: Any, result: Any, value: Any, problems: list[str]) -> Any:
    """The chunk's 0-d output, its structure checked while tracing (a problem recorded, and a 0 in its place)."""
    import jax
    import jax.numpy as jnp

    name, outputs = contract.outputs[0].name, contract.outputs_of(result)
    shape = contract.output_shape(name, dict(zip(contract.differentiable_inputs[0].dims, value.shape)))
    if outputs is None:
        problems.append(f"returned {type(result).__name__}, expected {contract.expected_result}")
    elif name not in outputs:
        problems.append(f"output {name!r} is missing")
    elif not isinstance(outputs[name], jax.Array):
        problems.append(f"{name} is {a_type_name(outputs[name])}, not a jax.Array")
    elif tuple(outputs[name].shape) != shape:
        problems.append(f"{name} has shape {tuple(outputs[name].shape)}, expected {shape}")
    else:
        return outputs[name]
    return jnp.zeros(shape, jnp.promote_types(value.dtype, jnp.float32))


def step_function(fn: Any, contract: Any, mesh: Any, ranks: int, steps: int, backward: bool,
                  problems: list[str]) -> Any:
    """The jitted step: shard_map over the mesh's data axis, a lax.scan over each device's chunks; forward, the
    chunks' outputs (R * G); with a cotangent, those and the step's combined gradient (R, G, rows, width)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    from fuzz.engines.jax_worker import shard_map_function

    averaged = contract.chunked.ranks_averaged(contract.bound)

    def call(value: Any, mask: Any, step_masks: list[Any]) -> Any:
        result = fn(value, mask, step_masks=step_masks, axis_name=AXIS, accumulation_steps=steps)
        return _output(contract, result, value, problems)

    def forward(values: Any, masks: Any) -> Any:
        step_masks = [masks[g] for g in range(steps)]
        return lax.scan(lambda carry, chunk: (carry, call(*chunk, step_masks)), None, (values, masks))[1]

    def forward_and_backward(values: Any, masks: Any, cotangent: Any) -> Any:
        step_masks = [masks[g] for g in range(steps)]

        def micro_batch(total: Any, chunk: Any) -> Any:
            g, value, mask = chunk
            out, pullback = jax.vjp(lambda v: call(v, mask, step_masks), value)
            # the cotangent in the output's dtype, and varying over the devices where the output is
            (gradient,) = pullback(jnp.zeros_like(out) + cotangent.astype(out.dtype))
            return total.at[g].add(gradient), out

        total, outs = lax.scan(micro_batch, jnp.zeros_like(values), (jnp.arange(steps), values, masks))
        mine = jnp.zeros((ranks, *total.shape), total.dtype).at[lax.axis_index(AXIS)].set(total)
        return outs, lax.pmean(mine, AXIS) if averaged else lax.psum(mine, AXIS)

    if backward:
        mapped = shard_map_function()(forward_and_backward, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P()),
                                      out_specs=(P(AXIS), P()))
    else:
        mapped = shard_map_function()(forward, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS))
    return jax.jit(mapped)


def run_step(job: dict[str, Any], runner: Any) -> dict[str, Any]:
    """In the mesh worker: one example's step on R of its devices, the chunks' outputs and the combined gradient
    read back as float64 (or what went wrong)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from fuzz.engines.torch_ranks import LOAD_FAILED
    from fuzz.judge.verdict import call_safely, named_by_forward_alone
    from impls.frameworks import load_framework
    from reference.dtypes import numpy_dtype

    adapter = load_framework("jax")
    case, split = job["case"], job["split"]
    contract, backward = case.contract, "cotangent" in job
    try:
        fn = runner.function(job["subject"], contract)
    except Exception as error:
        return {"failures": [Failure(LOAD_FAILED, f"cannot load the function: {type(error).__name__}: {error}")],
                "traceback": traceback.format_exc()}
    devices, batches = "device" + "s" * (split.ranks != 1), "micro-batch" + "es" * (split.steps != 1)
    where = (f"the step under jax.shard_map (R = {split.ranks} {devices}, each a lax.scan over its G = {split.steps} "
             f"{batches} of {split.rows_per_chunk} x {split.width}): ")
    values, masks = stacked(case, split, job["fill"])

    def run(with_backward: bool) -> tuple[Any, Verdict, list[str]]:
        """The step, forward alone or with its backward, compiled once per shape (a failed trace is dropped: the
        next example traces again); with what the trace found wrong in the chunks' outputs."""
        key = ("jax-accumulation", job["subject"], contract, split.ranks, split.steps, values.shape, case.dtype,
               with_backward)
        if key not in runner.compiled:
            problems: list[str] = []
            runner.compiled[key] = (step_function(fn, contract, runner.mesh((split.ranks, 1)), split.ranks,
                                                  split.steps, with_backward, problems), problems)
        step, problems = runner.compiled[key]
        sharding = NamedSharding(runner.mesh((split.ranks, 1)), P(AXIS))
        arguments = [jax.device_put(values.astype(numpy_dtype(case.dtype)), sharding),
                     jax.device_put(masks, sharding)]
        if with_backward:
            arguments.append(np.asarray(job["cotangent"], dtype=np.float64))  # converted to the output's dtype
        result, verdict = call_safely(lambda *arrays: jax.block_until_ready(step(*arrays)), *arguments)
        if not verdict.ok:
            runner.compiled.pop(key, None)
        return result, verdict, problems

    with adapter.scope(case):  # float64 cases under x64, the others under JAX's defaults
        result, verdict, problems = run(backward)
        if backward and not verdict.ok:  # one process: the forward can run alone on the same devices
            verdict = named_by_forward_alone(verdict, fn, lambda: run(False)[1])
        failures = [Failure(f.kind, f"{where}{f.message}{static_hint(fn, f)}") for f in verdict.failures]
        if not verdict.ok:
            return {"failures": failures, "traceback": verdict.traceback}
        failures += [Failure(STRUCTURE, f"{where}each chunk's {problem}") for problem in dict.fromkeys(problems)]
        outs, gradient = result if backward else (result, None)
        dtype = adapter.dtype_of(outs)
        allowed = contract.output_dtypes(case.dtype)
        name = contract.outputs[0].name
        if dtype not in allowed:
            failures.append(Failure(STRUCTURE, f"{where}each chunk's {name} has dtype {dtype}, expected "
                                               f"{' or '.join(allowed)}"))
        reply: dict[str, Any] = {"failures": failures, "traceback": None, "dtype": dtype,
                                 "losses": [float(value) for value in adapter.to_float64(outs)]}
        if gradient is not None:
            if adapter.dtype_of(gradient) != case.dtype:
                failures.append(Failure(GRADIENT_STRUCTURE, f"{where}the gradient has dtype "
                                                            f"{adapter.dtype_of(gradient)}, expected {case.dtype}"))
            reply["gradient"] = adapter.to_float64(gradient).reshape(values.shape)
        return reply
