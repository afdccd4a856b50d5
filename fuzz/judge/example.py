"""One forward example, whole: the call against the exact results (twice: determinism), then the contract's
invariants and one of its relations."""

from __future__ import annotations

from fuzz.judge.forward import check_forward_values
from fuzz.judge.relations import check_invariants, check_relation
from fuzz.judge.subject import Subject
from fuzz.judge.verdict import Verdict
from reference.case import Case


def check_example(subject: Subject, case: Case, relation: str | None, repeat: bool = True) -> Verdict:
    """Every forward check on one case: exact results, structure, inputs, invariants, one relation; with `repeat`,
    a second call for the determinism fact."""
    with subject.adapter.scope(case, compiled=subject.compiled):
        values, verdict = check_forward_values(subject.function_for(case.contract), subject.adapter, case,
                                               subject.precision, repeat=repeat)
        if verdict.ok and relation is not None and values is not None:
            verdict.merge(check_invariants(case, values.values, subject.precision))
            verdict.merge(check_relation(relation, subject, case, values.values))
    return verdict
