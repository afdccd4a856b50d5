"""One example, drawn and judged, of a subject (subject.py: the function, its adapter and what it is held to):
the draws (draws.py), the exact results (reference.exact), the one structure check of what a function returned
(outputs.py), the fixed cases checked besides the draws (anchors.py), the forward checks (forward.py), the relations
and invariants (relations.py), the gradient checks (gradients.py), what about the function may explain a failure
(misfit.py) and one whole example (example.py). What failed is a Verdict of Failures (verdict.py). Nothing
here imports a framework: the adapter does."""
