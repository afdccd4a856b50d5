"""The in-process accumulation engine: a per-chunk function called on each of a step's R x G chunks, in this
process, with the step's keywords, combined as the contract's ChunkedCall declares, and judged against the full
step's exact result.

Chunk k (rank k // G, accumulation step k % G) is called as fn(*its inputs, **keywords), the keywords the same
for every chunk (the step's global counts, R and G). The combined output is sum_k weight * output_k with weight =
1/R where the ranks' gradients are averaged (1 where summed) times the contract's backward scale; each chunk's
backward runs with the combined output's cotangent times its weight, and each token's gradient is its chunk's
(every token is in one chunk). Both must equal the full step's. A wrong combination is named by the contract's
`explain`, where it matches one of the usual mistakes.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fuzz.engines.chunks import (
    SHAPES,
    ChunkSplit,
    bucketed_chunks,
    chunk_case,
    chunk_weight,
    draw_chunks,
    explain_combined_gradient,
    judge_combined,
    shape_name,
    step_keywords,
)
from fuzz.engines.registry import Engine
from fuzz.judge.draws import Draw
from fuzz.judge.gradients import judge_gradients, named_by_pass
from fuzz.judge.outputs import check_gradient_arrays, check_outputs, modified_inputs
from fuzz.judge.verdict import Verdict, call_safely
from reference.case import Case

EMPTY_CHUNK = "empty chunk not exactly 0"


def _place(case: Case, split: ChunkSplit, k: int, name: str, values: np.ndarray, into: np.ndarray) -> None:
    dims = case.contract.input(name.removeprefix("d ")).dims
    into[tuple(split.rows(k) if dim == "batch" else slice(0, split.widths[k]) for dim in dims)] = values


class Accumulation(Engine):
    name = "accumulation"
    kind = "micro-batches"
    in_process = True
    campaign_examples = 20  # in this process: as cheap as a few single-process calls

    def row(self, shape: tuple[int, int] | None, check: str) -> str:
        return f"{self.kind} {shape_name(shape or (1, 1))}" + (" gradients" if check == "gradients" else "")

    def devices(self, spec: Any) -> list[str]:
        """Those of the function's framework (a built-in's own, a check's --framework)."""
        if spec.framework is None:
            from impls.registry import get_implementation

            return list(get_implementation(spec.name, spec.contract).devices)
        from fuzz.run.subjects import available_adapter
        from impls.frameworks import check_modes

        return available_adapter(check_modes()[spec.framework][0]).devices()

    def shapes(self, device: str) -> tuple[tuple[int, int], ...]:
        return SHAPES

    def draw_split(self, draw: Draw, case: Case, shape: tuple[int, int]) -> tuple[Case, ChunkSplit]:
        return draw_chunks(draw, case, shape)

    def fit(self, subject: Any, case: Case, split: ChunkSplit) -> tuple[Case, ChunkSplit]:
        """Chunks of a few bucketed shapes for a framework that compiles a program per shape (its trainers pad
        micro-batches to fixed shapes too); as drawn for the others."""
        return bucketed_chunks(case, split) if subject.adapter.compiles_per_shape else (case, split)

    def telling_split(self, subject: Any, case: Case, chunks: ChunkSplit) -> tuple[Case, ChunkSplit]:
        return self.fit(subject, case, chunks)

    def run(self, subject: Any, case: Case, split: ChunkSplit, cotangents: dict[str, np.ndarray] | None,
            exact: Any) -> Verdict:
        keywords, weight, adapter = step_keywords(case, split), chunk_weight(case, split), subject.adapter
        function = subject.function_for(case.contract)
        verdict, results, dtypes, output = Verdict(), [], [], case.contract.outputs[0].name
        gradients = {f"d {spec.name}": np.zeros(tuple(case.sizes[dim] for dim in spec.dims))
                     for spec in case.contract.differentiable_inputs}
        for k in range(split.chunks):
            chunk, prefix = chunk_case(case, split, k), f"{split.describe(k)}: "
            inputs = adapter.materialize(chunk, requires_grad=cotangents is not None)
            snapshot = adapter.snapshot(inputs)
            if cotangents is None:
                result, called = call_safely(functools.partial(function, **keywords), *inputs)
            else:
                scaled = {key: np.asarray(value) * weight for key, value in cotangents.items()}
                result, called = call_safely(adapter.vjp, function, inputs, scaled, case.contract, keywords)
                if not called.ok:
                    called = named_by_pass(called, function, adapter, chunk, keywords)
            verdict.merge(called, prefix=prefix)
            if not called.ok:
                return verdict
            verdict.merge(modified_inputs(adapter, chunk, inputs, snapshot), prefix=prefix)
            read, structure = (check_outputs if cotangents is None else check_gradient_arrays)(result, adapter, chunk)
            verdict.merge(structure, prefix=prefix)
            if read is None:
                return verdict
            if cotangents is None:
                value = float(np.asarray(read.values[output]))
                if chunk.shape[0] == 0 and value != 0:
                    verdict.fail(EMPTY_CHUNK, f"{prefix}an empty chunk's {output} is {value!r}, expected exactly 0")
                results.append(value)
                dtypes.append(next(iter(read.dtypes.values())))
            else:
                for name, values in read.values.items():
                    _place(case, split, k, name, values, gradients[name])
        if cotangents is not None:
            verdict.merge(judge_gradients(case, gradients, exact, cotangents, subject.precision,
                                          explain_combined_gradient(case, split)))
            return verdict
        combined = float(np.dot(results, np.full(len(results), weight)))
        verdict.merge(judge_combined(case, split, combined, dtypes[0], subject.precision, results),
                      prefix=f"the combined {output}: ")
        return verdict

    def snippet(self, subject: Any, case: Case, split: ChunkSplit, cotangents: dict[str, np.ndarray] | None,
                failures: list[str]) -> str:
        from fuzz.engines.snippets import accumulation_snippet

        return accumulation_snippet(subject, case, split, cotangents, failures)


ENGINE = Accumulation()
