"""A contract: everything specific to one function under test, as one value the whole suite runs over.

Modelled on PyTorch's OpInfo and JAX's `op_record` tables: the function under test is a record (its inputs
and outputs, its exact forward and VJP, its tolerance, its relations, its input domain, its worked examples,
its declared parameters), and every part of the suite (the draws, the adapters, the checks, the gradients,
the sharded engines, the snippets, the benchmarks, the registry) takes the record as a value and asks it,
instead of knowing the function's names. Adding a function is adding a module with its record
(`reference/<name>.py`, listed in `reference/contracts.py`).

Everything here is NumPy: no framework, no Hypothesis. Names of inputs and outputs appear only in the
contract modules.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from reference.case import Case

Arrays = dict[str, np.ndarray]


# How an explanation (Contract.explain, explain_gradient) joins the mistakes a wrong value equals, where a case
# makes several coincide (in a batch of one token the padded width, every position and the count are all 1).
ALTERNATIVES = "; or "


@dataclass(frozen=True)
class Input:
    """One argument of the function, in the order it is passed.

    `kind` "float": an array in the case's dtype (values drawn as float64 already rounded to it); "bool": a
    mask. `role` tells the strategies how to draw it: "tokens" (one value per token, ignored where the mask is
    false: padding there holds anything), "rows" (one value per row), "mask" (which tokens count). `mesh`
    names the mesh axis each dimension is split over on a sharded run ("data" splits rows, "sequence" splits a
    row's tokens)."""

    name: str
    dims: tuple[str, ...]
    kind: str = "float"
    role: str = "tokens"
    differentiable: bool = False
    mesh: tuple[str, ...] = ()

    @property
    def poison(self) -> float | bool:
        """What fills the gaps a strided layout skips: a kernel that ignores strides reads it and shows it."""
        return True if self.kind == "bool" else math.nan


@dataclass(frozen=True)
class Output:
    """One output. `replicated`: the mesh axes over which a per-rank function returns it identically on every
    rank (a row's value on each rank of its sequence group; a scalar on every rank): under torch.distributed
    each replica receives its cotangent, so the exact VJP sums them."""

    name: str
    dims: tuple[str, ...]
    replicated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """One value a relation or an invariant compares: got against want, within `tolerance` (elementwise)."""

    label: str
    got: np.ndarray
    want: np.ndarray
    tolerance: np.ndarray


# A relation's compare step: (first case, its values, derived cases, their values, tolerance of a case).
Compare = Callable[["Case", Arrays, "tuple[Case, ...]", "tuple[Arrays, ...]", Callable[["Case"], Arrays]],
                   list[Comparison]]


@dataclass(frozen=True)
class Relation:
    """A metamorphic relation: `derive` makes the cases of the second calls from the first case (none where it
    does not apply), and `compare` says what their results must equal. Each side is within its own tolerance,
    so the comparisons' tolerances add both."""

    name: str
    derive: Callable[[Case], tuple[Case, ...]]
    compare: Compare
    # its derived cases bind other declared parameters (another mode): only for a subject that can be bound so,
    # a built-in, never a user's function of one mode
    rebinds: bool = False


@dataclass(frozen=True)
class Invariant:
    """A property of one call's values alone (a bound the function's results must respect): `check` returns
    a message where it fails, else None."""

    kind: str
    check: Callable[[Case, Any, Arrays, Arrays], str | None]  # (case, exact, values, tolerances) -> failure


@dataclass(frozen=True)
class ValueMenu:
    """How the strategies draw one float input: a labelled kind from `kinds` (weighted by repetition; the first
    is the simplest, where shrinking goes), then `make(rng, kind, shape, zero_fraction)` makes the values.
    `split_kinds`: the kinds an engine's cells draw from (None: the same), leaving out those under which no
    gradient crosses ranks (every advantage 0), so that a split's few examples exercise the collectives.
    `one_sign`: a kind whose values all share one sign (None: none is named), so that a row's sum grows with its
    length: a count or a running sum gone wrong on a long row then shows beyond the sum's own rounding, where
    values of both signs cancel and hide it under the tolerance (the fixed case of long rows draws this kind)."""

    label: str
    kinds: tuple[str, ...]
    make: Callable[[np.random.Generator, str, tuple[int, ...], float], np.ndarray]
    split_kinds: tuple[str, ...] | None = None
    one_sign: str | None = None

    def __post_init__(self) -> None:
        if self.one_sign is not None and self.one_sign not in self.kinds:
            raise ValueError(f"{self.label}: one_sign {self.one_sign!r} is not one of its kinds {self.kinds}")


@dataclass(frozen=True)
class Domain:
    """The input domain the strategies draw from: a menu per float input, and `bound`, which scales drawn
    values (by powers of two: exactly) so every exact result and partial sum is representable in the dtype.
    `bound(values, dtype, repeats)` gets the float inputs before the rows of an expanded layout are repeated
    (`repeats` times each)."""

    menus: Mapping[str, ValueMenu]
    bound: Callable[[Arrays, np.ndarray, str, int], Arrays]


@dataclass(frozen=True)
class Example:
    """A worked example: inputs (nested lists), declared parameters, and the exact outputs."""

    name: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Parameter:
    """A declared parameter: a choice made by the user, not an input of the function (a mode, a constant)."""

    name: str
    choices: tuple[Any, ...] | None  # None: any value `check` accepts (e.g. a positive number)
    default: Any
    help: str
    aliases: Mapping[str, Any] = field(default_factory=dict)  # other spellings of the same choices
    check: Callable[[Any], Any] | None = None  # for a parameter without choices: its value, or ValueError
    # A spelling that also declares other parameters where they are left undeclared: a trainer's name for a
    # mode carries that trainer's convention ({"sequence-mean-token-mean": {"rows": "nonempty"}}, tunix's).
    implies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def value(self, given: Any) -> Any:
        """The canonical value of `given` (an alias resolved); ValueError naming the parameter if invalid."""
        value = self.aliases.get(given, given) if isinstance(given, str) else given
        if self.choices is not None and value not in self.choices:
            spellings = [str(spelling) for spelling in (*self.choices, *self.aliases)]
            near = difflib.get_close_matches(str(given), spellings, n=1)
            raise ValueError(f"{self.name} must be one of {', '.join(spellings)}, got {given!r}"
                             + (f" (did you mean {near[0]}?)" if near else ""))
        return self.check(value) if self.check is not None else value

    def spellings(self) -> str:
        """Every spelling `value` accepts, as a command's help lists them: the choices, then the aliases."""
        choices = ", ".join(str(choice) for choice in self.choices or ())
        return f"{choices}; or an alias: {', '.join(self.aliases)}" if self.aliases else choices

    def implied(self, given: Any) -> Mapping[str, Any]:
        """What the spelling `given` declares of the other parameters (nothing for most spellings)."""
        return self.implies.get(given, {}) if isinstance(given, str) else {}


@dataclass(frozen=True)
class ChunkedCall:
    """How a per-chunk function is called on a step split over R ranks x G accumulation steps, and how its chunks'
    results combine into the full step's: what an engine of micro-batches or ranks asks the contract.

    `keywords(case, ranks, steps)`: the step's keyword arguments, the same for every chunk (its global counts).
    `ranks_averaged(bound)`: whether the ranks' gradients are averaged (DDP, FSDP) rather than summed.
    `step_scale(bound, steps)`: what each chunk's backward is scaled by (1, or 1/G).
    `explain(case, chunks, ranks, steps, combined, counts_its_own)`: a wrong combination named by its likely
    cause, or None; `counts_its_own`: the chunks ran as a rank form, which counts the step's normalizers itself.
    `explain_gradient(got, exact, tolerance, ranks, steps, bound)`: a wrong combined gradient named so (under the
    declared parameters `bound`), or None."""

    keywords: Callable[[Case, int, int], dict[str, int]]
    ranks_averaged: Callable[[Mapping[str, Any]], bool]
    step_scale: Callable[[Mapping[str, Any], int], float]
    explain: Callable[[Case, Sequence[Case], int, int, float, bool], str | None] | None = None
    explain_gradient: Callable[[np.ndarray, np.ndarray, np.ndarray, int, int, Mapping[str, Any]], str | None] | None = (
        None)

    def weight(self, bound: Mapping[str, Any], ranks: int, steps: int) -> float:
        """Each chunk's share of the combination: 1/R under the ranks' mean, times its backward scale."""
        return (1.0 / ranks if self.ranks_averaged(bound) else 1.0) * self.step_scale(bound, steps)


@dataclass(frozen=True, eq=False)  # one value per (contract, parameters): reference.contracts makes each once
class Contract:
    """The record of one function under test. Its callables are the contract module's own functions.

    Exact results: `exact(case)` returns an object with `outputs() -> {name: float64 array}` and whatever the
    tolerance needs; `vjp(case, cotangents, exact)` one with `inputs() -> {differentiable input: gradient}`.
    Tolerances (reference/tolerance.py's model, derived per contract in docs/tolerance.md):
    `tolerance(exact, dtype, precision) -> {output: tol}`, `gradient_tolerance(gradients, cotangents, dtype,
    precision) -> {input: (tol, ulp scale)}`. `ulp_scales(exact)`: the magnitude each output is computed at.
    Overflow is not rounding: `forward_overflow` / `backward_overflow` explain a non-finite value where an
    exact intermediate exceeds the dtype's range, or return None (then it is a plain bug)."""

    name: str
    title: str
    signature: str  # how the README and the snippets call it: "fn(token_log_probs, advantages, token_mask)"
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    returns_mapping: bool  # a Mapping of the outputs by name; else the single output itself
    exact: Callable[[Case], Any]
    vjp: Callable[[Case, Arrays, Any], Any]
    tolerance: Callable[[Any, str, str], Arrays]
    gradient_tolerance: Callable[[Any, Arrays, str, str], dict[str, tuple[np.ndarray, np.ndarray]]]
    ulp_scales: Callable[[Any], dict[str, Any]]
    output_dtypes: Callable[[str], tuple[str, ...]]  # the dtypes an output may have for an input dtype
    forward_overflow: Callable[[Any, str, str], str | None]  # (exact, dtype, output) -> explanation
    backward_overflow: Callable[[Any, Arrays, str, str], str | None]  # (gradients, cotangents, dtype, precision)
    domain: Domain
    relations: tuple[Relation, ...]
    invariants: tuple[Invariant, ...]
    cotangent_kinds: tuple[str, ...]  # the first is the fullest (all outputs), where shrinking goes
    cotangents: Callable[[str, np.random.Generator, Case], Arrays]  # (kind, rng, case) -> a cotangent per output
    examples: tuple[Example, ...]
    parameters: tuple[Parameter, ...] = ()
    # cotangent kinds under which no gradient crosses ranks (all zero): an engine's cells draw the others
    trivial_cotangent_kinds: tuple[str, ...] = ()
    bound: Mapping[str, Any] = field(default_factory=dict)  # the declared parameters' values
    # the parameters' joint rules (one that only matters in some modes normalized away, one a mode needs)
    parameter_rules: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # the parameter sets the campaign draws from, one per example, for a built-in that takes them all
    parameter_menu: tuple[Mapping[str, Any], ...] = ()
    # how a report names the bound parameters that matter ("seq-mean-token-mean, rows=all")
    parameter_label: Callable[[Mapping[str, Any]], str] | None = None
    # keyword arguments the function takes besides its inputs, each a Python int the engine computes (a step's
    # global normalizers): the engines call fn(*inputs, **keywords)
    keywords: tuple[str, ...] = ()
    # a wrong value explained in the contract's terms ("equals seq-mean-token-sum / 16, the padded width")
    explain: Callable[[Case, Arrays], str | None] | None = None
    # a wrong gradient explained so, from the case, the cotangents and the gradients by input name ("it is the
    # gradient of the exact token-mean, where seq-mean-token-mean is declared?")
    explain_gradient: Callable[[Case, Arrays, Arrays], str | None] | None = None
    # a wrong value of a per-rank function on a data x sequence mesh explained so, from the case, the row cuts and
    # token cuts of its split and the values ("a mean of per-rank means?"), the mistakes of `explain` after those
    explain_split: Callable[[Case, Sequence[int], Sequence[int], Arrays], str | None] | None = None
    # a per-chunk function of a split step (micro-batches, ranks): how it is called and combined; None if not one
    chunked: ChunkedCall | None = None
    # whether, under the bound parameters, a fully masked row changes the outputs (a reduction whose D counts every
    # row): a batch padded with such rows is then another batch, judged as the function is given it
    counts_empty_rows: Callable[[Mapping[str, Any]], bool] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by name and parameters (to worker and rank processes): the record is rebuilt there from the
        contract's module, so its functions never travel."""
        from reference.contracts import get_contract

        return get_contract, (self.name, dict(self.bound))

    # --- names and shapes -------------------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.outputs)

    @property
    def differentiable_inputs(self) -> tuple[Input, ...]:
        return tuple(spec for spec in self.inputs if spec.differentiable)

    @property
    def mask(self) -> Input:
        """The input that says which tokens count."""
        return next(spec for spec in self.inputs if spec.role == "mask")

    def input(self, name: str) -> Input:
        return next(spec for spec in self.inputs if spec.name == name)

    def parameter(self, name: str) -> Parameter:
        return next(spec for spec in self.parameters if spec.name == name)

    def output_shape(self, name: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(sizes[dim] for dim in next(spec for spec in self.outputs if spec.name == name).dims)

    # --- declared parameters ----------------------------------------------------------------------------
    @property
    def parameters_text(self) -> str:
        """The bound parameters that matter, for reports: "seq-mean-token-mean, rows=all" ("" without any)."""
        if not self.bound:
            return ""
        if self.parameter_label is not None:
            return self.parameter_label(self.bound)
        return ", ".join(f"{name}={value}" for name, value in self.bound.items())

    @property
    def empty_rows_count(self) -> bool:
        """Whether fully masked rows change the outputs under the bound parameters (`counts_empty_rows`)."""
        return self.counts_empty_rows is not None and self.counts_empty_rows(self.bound)

    @property
    def label(self) -> str:
        """The contract and its bound parameters, for reports: "reduction (seq-mean-token-mean, rows=all)"."""
        return f"{self.name} ({self.parameters_text})" if self.bound else self.name

    def bind(self, **values: Any) -> Contract:
        """The contract with its declared parameters set (one value per set: reference.contracts makes it);
        ValueError naming a parameter that is unknown or invalid (a missing one keeps its value or default, except
        where a spelling given here implies it: tunix's name for a mode brings tunix's rows)."""
        from reference.contracts import get_contract

        implied = self.implied_by(values)
        kept = {name: value for name, value in self.bound.items() if name not in implied}
        return get_contract(self.name, {**kept, **values})

    def implied_by(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """What the spellings in `values` declare of other parameters: a trainer's name for a mode, its
        convention."""
        implied: dict[str, Any] = {}
        for spec in self.parameters:
            implied.update(spec.implied(values.get(spec.name)))
        return implied

    def canonical_parameters(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared parameter's canonical value (aliases resolved; one left out, or None where that means
        undeclared, takes what a declared spelling implies for it, else its default); ValueError naming one that
        is unknown or invalid."""
        known = {spec.name: spec for spec in self.parameters}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"the {self.name} contract has no parameter {unknown[0]!r}; "
                             f"its parameters: {', '.join(known) or 'none'}")
        # None leaves undeclared only a parameter that has no other default or that a spelling can imply: for
        # the others (a mode) it stays a value, and an invalid one (mode=cfg.get(...) with the key missing)
        implicit = {name for spec in self.parameters for implied in spec.implies.values() for name in implied}
        declared = {name: value for name, value in values.items()
                    if value is not None or (known[name].default is not None and name not in implicit)}
        implied = self.implied_by(declared)
        canonical = {name: spec.value(declared.get(name, implied.get(name, spec.default)))
                     for name, spec in known.items()}
        return self.parameter_rules(canonical) if self.parameter_rules is not None else canonical

    def with_bound(self, parameters: Mapping[str, Any]) -> Contract:
        """A new record with these (canonical) parameter values: for reference.contracts only."""
        return replace(self, bound=dict(parameters))

    @property
    def expected_result(self) -> str:
        """What the function must return, for messages."""
        if self.returns_mapping:
            return f"a dict with keys {self.output_names}"  # any Mapping is accepted; a dict is what users write
        return f"the array {self.outputs[0].name!r}"

    def outputs_of(self, result: Any) -> Mapping[str, Any] | None:
        """The function's result as {output: value}, or None where its structure is not the contract's."""
        if self.returns_mapping:
            return result if isinstance(result, Mapping) else None
        return {self.outputs[0].name: result}

    def sizes(self, values: Mapping[str, np.ndarray]) -> dict[str, int]:
        """The size of each dimension name ("batch", "tokens") in a set of input values."""
        sizes: dict[str, int] = {}
        for spec in self.inputs:
            sizes.update(zip(spec.dims, np.shape(values[spec.name])))
        return sizes

    def bytes_moved(self, sizes: Mapping[str, int], itemsize: int) -> int:
        """Bytes one call must touch at least: every input read once (a mask 1 byte per element) and every
        output written once, in the input dtype."""
        def count(dims: Sequence[str]) -> int:
            return math.prod(sizes[dim] for dim in dims)

        read = sum(count(spec.dims) * (1 if spec.kind == "bool" else itemsize) for spec in self.inputs)
        return read + sum(count(spec.dims) * itemsize for spec in self.outputs)
