"""Snippets run and reproduce: valid Python whatever the failure says, inputs rebuilt exactly as the fuzzer
built them (buffer, poison, strides, offset), compiler failures shortened, hints only where they apply."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from hypothesis import find, settings

from fuzz.judge.draws import cases
from fuzz.judge.gradients import check_gradients
from fuzz.judge.subject import Subject
from fuzz.report.results import Bug, CellResult
from fuzz.report.snippet import SnippetSource, snippet_for
from fuzz.report.terminal import bugs, joined
from impls import get_implementation
from impls.frameworks import adapter_class, load_framework
from impls.layouts import LAYOUTS, STRIDED_LAYOUTS_WITHOUT_NEGATIVE
from reference.case import Case
from reference.magnitude import complete_cotangents, vjp

torch = pytest.importorskip("torch")


def _case(shape=(2, 3), layout="contiguous", dtype="float32", rows_equal=False):
    batch, tokens = shape
    rng = np.random.default_rng(0)
    rows = 1 if rows_equal else batch
    log_probs = np.repeat(-rng.integers(0, 8, (rows, tokens)).astype(np.float64), batch // max(rows, 1), axis=0)
    mask = np.repeat(rng.random((rows, tokens)) < 0.6, batch // max(rows, 1), axis=0)
    advantages = np.full(batch, 1.5) if rows_equal else rng.integers(-3, 4, batch).astype(np.float64)
    return Case(log_probs.reshape(shape), advantages.reshape(batch), mask.reshape(shape), dtype=dtype, layout=layout)


def _snippet(case, framework, failures=("something failed",), function_name="recorded"):
    source = SnippetSource("recorded", framework, (), function_name, None, ())
    return snippet_for(source, case, list(failures))


def _inputs_of(snippet, framework):
    """Run the snippet with a correct function that records the inputs it was given."""
    implementation = get_implementation("torch-eager" if framework == "torch" else "numpy")
    seen = []

    def recorded(*inputs):
        seen.append(inputs)
        return implementation(*inputs)

    exec(compile(snippet, "<snippet>", "exec"), {"recorded": recorded})  # passes: the function is correct
    return seen[0]


def _torch_layout(x):
    return (tuple(x.shape), x.stride(), x.storage_offset(), bytes(x.untyped_storage()))


@pytest.mark.parametrize("shape", [(2, 3), (3, 3), (1, 4), (2, 0), (0, 3), (0, 0)], ids=str)
@pytest.mark.parametrize("layout", STRIDED_LAYOUTS_WITHOUT_NEGATIVE)
def test_torch_snippet_rebuilds_the_exact_buffer_strides_and_offset(layout, shape):
    case = _case(shape, layout, rows_equal=layout == "expanded")
    fuzzed = load_framework("torch").materialize(case)
    rebuilt = _inputs_of(_snippet(case, "torch"), "torch")
    for want, got in zip(fuzzed, rebuilt):
        assert _torch_layout(got) == _torch_layout(want)  # NaN / True poison in the gaps included


@pytest.mark.parametrize("shape", [(2, 3), (3, 3), (2, 0), (0, 3), (0, 0)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_snippet_rebuilds_the_exact_strides(layout, shape):
    case = _case(shape, layout, rows_equal=layout == "expanded")
    fuzzed = load_framework("numpy").materialize(case)
    rebuilt = _inputs_of(_snippet(case, "numpy"), "numpy")
    for want, got in zip(fuzzed, rebuilt):
        assert (got.shape, got.strides, got.dtype, got.flags.writeable) == (
            want.shape, want.strides, want.dtype, want.flags.writeable)
        np.testing.assert_array_equal(got, want)


def test_an_empty_transposed_tensor_keeps_its_strides():
    case = _case((2, 0), "transposed")
    token_log_probs = _inputs_of(_snippet(case, "torch"), "torch")[0]
    assert token_log_probs.shape == (2, 0) and token_log_probs.stride() == (1, 2)  # contiguous would be (1, 1)


def test_the_gaps_of_a_strided_layout_hold_the_fuzzers_poison():
    snippet = _snippet(_case((2, 3), "step-sliced"), "torch")
    assert "as_strided((2, 3), (12, 2), 0)" in snippet
    for x, poison in zip(_inputs_of(snippet, "torch")[::2], (float("nan"), True)):
        storage = torch.tensor([], dtype=x.dtype).set_(x.untyped_storage())  # the whole buffer, 1-D
        used = {row * 12 + column * 2 for row in range(2) for column in range(3)}
        gaps = [i for i in range(storage.numel()) if i not in used]
        assert storage.numel() == 17 and gaps
        gap_values = storage[gaps]
        assert (gap_values.isnan() if poison != poison else gap_values).all()  # NaN in log-probs, True in the mask


def test_a_multi_line_failure_is_commented_on_every_line():
    failure = "raised RuntimeError: first line\nsecond line: x = 1\n  third line (indented)"
    snippet = _snippet(_case(), "numpy", failures=[failure])
    ast.parse(snippet)  # valid Python
    lines = snippet.splitlines()
    start = lines.index("# FAILED: raised RuntimeError: first line")
    assert lines[start + 1 : start + 3] == ["#   second line: x = 1", "#     third line (indented)"]


COMPILER_OUTPUT = ("raised InductorError: CppCompileError: C++ compile error\n\nCommand:\ng++ /tmp/x.cpp\n\nOutput:\n"
                   + "\n".join(f"/tmp/x.cpp:{i}: error: no match for 'operator+' (operand types)" for i in range(20000))
                   + "\nninja: build stopped: subcommand failed.")


COMPILE_LABEL = adapter_class("torch").compiler_label  # "torch.compile failed to compile this input"


def test_a_compiler_failure_is_labelled_and_shortened_in_the_terminal_and_whole_in_the_json():
    snippet = _snippet(_case(), "torch", failures=[COMPILER_OUTPUT])
    ast.parse(snippet)
    assert f"# FAILED: {COMPILE_LABEL}: raised InductorError" in snippet and len(snippet) < 8000
    bug = Bug("raised InductorError", [COMPILER_OUTPUT], _case(), snippet,
              traceback="Traceback (most recent call last):\n" + COMPILER_OUTPUT)
    cell = CellResult("f", "cpu", "float16", "forward", bugs=[bug])
    terminal = joined(bugs([cell]))
    assert COMPILE_LABEL in terminal and "subcommand failed" in terminal and len(terminal) < 20000
    assert cell.as_json()["failures"] == [COMPILER_OUTPUT]  # the full text stays in the JSON


def test_a_snippet_fails_with_assertion_error_whatever_the_function_does():
    for function, message in [(lambda *a: None, "returned NoneType"), (lambda *a: 1 / 0, "raised ZeroDivisionError")]:
        snippet = _snippet(_case(), "numpy", function_name="f")
        with pytest.raises(AssertionError, match=message):
            exec(compile(snippet, "<snippet>", "exec"), {"f": function})


def _doubled_advantage_gradient(lp, adv, mask):
    adv = 2 * adv - adv.detach()  # same values, twice the gradient: a bug that has nothing to do with sign(0)
    return get_implementation("torch-eager")(lp, adv, mask)


@pytest.mark.parametrize("advantages", [[0.0, 0.0], [0.0, 2.0]], ids=["denominator-0", "denominator-positive"])
def test_a_gradient_bug_at_a_row_whose_s_is_0_is_caught_and_not_blamed_on_the_kink(advantages):
    """Row 0 has s_0 = 0 (A_0 = 0), where any subgradient of |x| is right; a gradient twice too large is
    still caught there, as what it is."""
    case = Case(np.array([[-1.0, -2.0], [-3.0, -4.0]]), np.array(advantages), np.ones((2, 2), bool))
    cotangents = complete_cotangents({"sequence_summed": np.array([1.0, 1.0]), "token_averaged": np.array([1.0, 1.0]),
                                      "magnitude_ratio": np.array(1.0)}, 2)
    exact = vjp(case.token_log_probs, case.advantages, case.token_mask, cotangents)
    subject = Subject("f", _doubled_advantage_gradient, load_framework("torch"), case.contract, (), "f")
    verdict = check_gradients(subject, case, cotangents, exact)
    assert "d advantages out of tolerance" in [failure.kind for failure in verdict.failures]
    assert not any("sign(0)" in failure.message for failure in verdict.failures)


def test_a_case_with_no_tokens_says_so():
    case = find(cases(), lambda case: case.shape[0] > 0 and case.shape[1] == 0,
                settings=settings(database=None, max_examples=2000))
    assert dict(case.story)["mask"] == "every row has no tokens (tokens 0)"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("framework", ["torch", "jax", "numpy", "array-api"])
def test_every_line_of_a_snippet_fits_the_terminals_columns(framework, dtype):
    """Inputs of the longest name (token_log_probs) holding values of long literals, in every layout the framework
    has: each line within the 100 columns the terminal prints (a JAX array is put on its device by a short helper,
    not by `jax.device_put(..., jax.devices('cpu')[0])` around it), so a short snippet is printed, not filed."""
    from fuzz.report.texts import WIDTH
    from reference.dtypes import round_to

    rng = np.random.default_rng(1)
    layouts = LAYOUTS if adapter_class(framework).snippet_syntax(_case(dtype=dtype)).strided else ["contiguous"]
    for layout in layouts:
        for shape in [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 2)]:
            for _ in range(10):
                rows = (1, shape[1]) if layout == "expanded" else shape  # stride 0: every row the same
                log_probs = round_to(rng.uniform(-1000, 1000, rows) * 10.0 ** rng.integers(-6, 1), dtype)
                advantages = round_to(np.full(shape[0], rng.uniform(-3, 3)), dtype)
                mask = rng.random(rows) < 0.6
                case = Case(np.broadcast_to(log_probs, shape).copy(), advantages,
                            np.broadcast_to(mask, shape).copy(), dtype=dtype, layout=layout)
                snippet = _snippet(case, framework)
                widest = max(snippet.splitlines(), key=len)
                assert len(widest) <= WIDTH, (layout, widest)


@pytest.mark.parametrize("framework", ["torch", "jax", "numpy", "array-api"])
def test_an_array_of_one_repeated_value_is_one_line_and_rebuilt_exactly(framework):
    """The gradient cells' fixed case with nothing selected (4 x 7, fuzz.judge.anchors): its mask, the exact
    gradients and their tolerances are one value repeated, written as `[[False] * 7] * 4`, so that its snippet,
    gradients and all, is short and narrow enough to be printed; and it still rebuilds the very inputs and checks
    them."""
    from fuzz.report.terminal import SNIPPET_LINES
    from fuzz.report.texts import WIDTH
    from reference.dtypes import round_to

    rng = np.random.default_rng(2)
    case = Case(round_to(rng.uniform(-5, 0, (4, 7)), "float32"), round_to(rng.uniform(-2, 2, 4), "float32"),
                np.zeros((4, 7), bool), dtype="float32")
    differentiable = framework in ("torch", "jax")  # NumPy and the Array API have no gradients to check
    cotangents = complete_cotangents({"sequence_summed": rng.uniform(-1, 1, 4), "token_averaged": rng.uniform(-1, 1, 4),
                                      "magnitude_ratio": np.array(0.5)}, 4) if differentiable else None
    source = SnippetSource("recorded", framework, (), "recorded", None, ())
    snippet = snippet_for(source, case, ["d advantages is not finite"], cotangents)
    assert "[[False] * 7] * 4" in snippet
    assert snippet.count("[[0.0] * 7] * 4") == (2 if differentiable else 0)  # the gradient and its tolerance
    assert len(snippet.splitlines()) <= SNIPPET_LINES
    assert max(len(line) for line in snippet.splitlines()) <= WIDTH  # the backward's lines too
    implementation = get_implementation({"torch": "torch-eager", "jax": "jax-jit", "numpy": "numpy",
                                         "array-api": "array-api"}[framework])
    namespace = {"recorded": implementation}
    exec(compile(snippet, "<snippet>", "exec"), namespace)  # the built-in is right: no AssertionError
    adapter = load_framework(framework)
    np.testing.assert_array_equal(adapter.to_float64(namespace["token_log_probs"]), case.token_log_probs)
    np.testing.assert_array_equal(adapter.to_bool(namespace["token_mask"]), case.token_mask)


@pytest.mark.parametrize("shape", [(2, 3), (16, 300)], ids=str)
def test_a_gradient_snippet_prints_a_large_array_summarized_and_a_small_one_whole(shape, capsys):
    """A wrong gradient of a wide batch (16 x 300 tokens): the snippet's output and its assertion show each array
    summarized (NumPy's `...`), a few KB where every value printed as got, expected and tolerance was hundreds; a
    small one's values are printed whole."""
    rng = np.random.default_rng(3)
    case = Case(-rng.integers(1, 8, shape).astype(np.float64), np.full(shape[0], 1.5), np.ones(shape, bool),
                dtype="float32")
    cotangents = complete_cotangents({"sequence_summed": np.ones(shape[0]), "token_averaged": np.ones(shape[0]),
                                      "magnitude_ratio": np.array(1.0)}, shape[0])
    source = SnippetSource("f", "torch", (), "f", None, ())
    snippet = snippet_for(source, case, ["d token_log_probs out of tolerance"], cotangents)

    def doubled_log_prob_gradient(log_probs, advantages, mask):
        return get_implementation("torch-eager")(2 * log_probs - log_probs.detach(), advantages, mask)

    with pytest.raises(AssertionError) as raised:
        exec(compile(snippet, "<snippet>", "exec"), {"f": doubled_log_prob_gradient})
    printed, said = capsys.readouterr().out, str(raised.value)
    assert said.startswith("d token_log_probs: got [[")
    if shape == (16, 300):
        assert "..." in printed and "..." in said
        assert len(printed) + len(said) < 8000, (len(printed), len(said))
    else:
        assert "..." not in printed + said
        got = printed.partition("expected")[0].partition("got")[2]  # the log-probs' gradient, every value
        assert len(got.replace("[", " ").replace("]", " ").replace(",", " ").split()) == shape[0] * shape[1]
