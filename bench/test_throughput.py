"""The throughput suite: every implementation of each benchmarked contract, and the floor kernels reading as many
bytes as that contract moves, per device x dtype x size.

Honest timing: warm-up calls (where torch.compile compiles and jax.jit traces) run until a call compiles
nothing, and are not timed; the result of a warm-up call is checked against the exact reference under
the fuzzer's tolerance before anything is timed; the timed call waits for the device
(`adapter.synchronize`); and the number of compiled graphs must not move while timing. An implementation's
fraction of the floor is timed side by side: its calls alternate with the floor kernels' (bench/paired.py).

Run explicitly (pyproject's addopts disable pytest-benchmark, and testpaths leave bench/ out):
    PYTHONPATH=. python -m pytest bench/test_throughput.py --benchmark-enable
"""

from __future__ import annotations

import pytest

from bench.contracts import bench_contract
from bench.floor import FloorKernel, Timed, elements_for, kernel_named
from bench.inputs import make_case, worst_error
from bench.paired import alternate
from bench.plan import Target, UserTarget, floor_kernels
from bench.user_rows import USER_ROW, user_row
from impls import get_implementation
from reference.dtypes import numpy_dtype
from reference.tolerance import CONTRACT, STRICT, Precision

MAX_WARMUP_CALLS = 10
# A user's first call that overran its time limit stuck in C code cannot be interrupted: it keeps a core busy in
# this process until it returns, so the run ends at the next row (its name, once one is).
_still_running: list[str] = []


def test_throughput(benchmark, target_id: str, warmup_calls: int,  # type: ignore[no-untyped-def]
                    reduction_mode: str | None, pairing: tuple[int, float], user: UserTarget | None,
                    call_timeout: float | None) -> None:
    target = Target.from_id(target_id)
    benchmark.group = target.group
    if _still_running:  # the rows left are not run: any time taken now would be skewed
        pytest.exit(f"the run ends here: the first call of {_still_running[0]} could not be stopped and still runs in "
                    "this process, so any later time would be skewed", returncode=1)
    # its declared parameters bound (a mode); beside a user's function, the ones it declared: one group of rows
    yours = user is not None and target.contract == user.contract
    contract = user.bound_contract if yours else bench_contract(target.contract, reduction_mode)
    if target.floor:
        run_floor(benchmark, target, contract)
    elif target.subject == USER_ROW:
        assert user is not None
        from fuzz.run.calls import DEFAULT_TIMEOUT

        row = user_row(user.target, user.framework, user.contract, dict(user.parameters), user.masked_values)
        run_implementation(benchmark, target, warmup_calls, row, pairing, CONTRACT, user.masked_values,
                           DEFAULT_TIMEOUT if call_timeout is None else call_timeout)
    else:
        impl = get_implementation(target.subject, target.contract)
        run_implementation(benchmark, target, warmup_calls, impl.bind(**contract.bound) if contract.bound else impl,
                           pairing, STRICT)


def run_implementation(benchmark, target: Target, warmup_calls: int, impl,  # type: ignore[no-untyped-def]
                       pairing: tuple[int, float], precision: Precision, masked_values: str = "any",
                       first_call_timeout: float | None = None) -> None:
    """A built-in (held to its strict promise) or the user's function (to the contract) as `precision` says. The
    user's function (`first_call_timeout` given) is first called as `check` calls it, with that time limit: what it
    returns, raises or overruns is said, and the row is not timed."""
    case = make_case(impl.contract, target.size.batch, target.size.tokens, target.dtype, masked_values)
    case = case.with_(device=target.device)
    # The framework settings the case needs (JAX's x64 for float64; dynamo's recompile policy while
    # compiling), entered once for the whole row: nothing per call is added to the timed region.
    with impl.adapter.scope(case, compiled=impl.compiled):
        failures, running = ([], False) if first_call_timeout is None else impl.first_call_failures(
            case, precision, first_call_timeout)
        if running:
            _still_running.append(impl.name)
        if failures:
            pytest.fail(f"{impl.name} fails its check in {target.dtype} on {target.device}: {'; '.join(failures)}; "
                        "not timed (`python -m fuzz check` shows why)", pytrace=False)
        _time_implementation(benchmark, target, warmup_calls, impl, case, pairing, precision)


def _time_implementation(benchmark, target: Target, warmup_calls: int, impl, case,  # type: ignore[no-untyped-def]
                         pairing: tuple[int, float], precision: Precision) -> None:
    adapter = impl.adapter
    size = target.size
    inputs = adapter.materialize(case)

    def call() -> object:
        outputs = impl(*inputs)
        adapter.synchronize(outputs)
        return outputs

    compiled = impl.compile_counter()
    warm = 0
    for warm in range(1, MAX_WARMUP_CALLS + 1):  # until `warmup_calls` calls in a row compiled nothing
        before = compiled()
        outputs = call()
        if warm >= warmup_calls and compiled() == before:
            break
    named = impl.contract.outputs_of(outputs)
    values = {key: adapter.to_float64(named[key]) for key in impl.contract.output_names}
    errors = worst_error(values, case, precision)
    if max(errors.values()) > 1:  # the message alone: the harness's traceback says nothing about the function
        pytest.fail(f"{impl.name} is wrong in {target.dtype} on {target.device} (err/tol per output under the "
                    f"{precision.name} tolerance: {errors}); not timed (`python -m fuzz check` shows why)",
                    pytrace=False)

    graphs = compiled()
    benchmark(call)
    elements = _floor_elements(impl.contract, target)
    floors = {kernel.name: _ready_floor(kernel, target.device, elements) for kernel in floor_kernels(target.device)}
    paired = alternate(call, floors, *pairing)
    assert compiled() == graphs, f"{target.id} compiled {compiled() - graphs} graph(s) while being timed"
    benchmark.extra_info.update(
        kind="implementation",
        implementation=impl.name,
        contract=target.contract,
        parameters=impl.contract.parameters_text,
        device=target.device,
        dtype=target.dtype,
        size=size.name,
        batch=size.batch,
        tokens=size.tokens,
        bytes=impl.contract.bytes_moved(case.sizes, numpy_dtype(target.dtype).itemsize),
        warmup_calls=warm,
        worst_error_over_tolerance=max(errors.values()),
        paired_floor_s=paired.floor_s,
        paired_floor_kernel=paired.floor_kernel,
        paired_median_s=paired.median_s,
        paired_rounds=paired.rounds,
    )


def _floor_elements(contract, target: Target) -> int:  # type: ignore[no-untyped-def]
    """The float32 values a floor kernel reads for a row: as many bytes as the contract moves."""
    sizes = {"batch": target.size.batch, "tokens": target.size.tokens}
    return elements_for(contract.bytes_moved(sizes, numpy_dtype(target.dtype).itemsize))


def _ready_floor(kernel: FloorKernel, device: str, elements: int) -> Timed:
    """The floor kernel prepared to read `elements` float32 values on `device`, warmed up (jit compilation, first
    touch of the output) and its sum checked: a floor row's, and an implementation row's paired floors."""
    call = kernel.prepare(device, elements)
    total = 0.0
    for _ in range(2):
        total = float(call())  # a 0-d array of any framework, on any device
    assert total == pytest.approx(elements, rel=1e-3), f"floor kernel {kernel.name} summed {total}, not {elements}"
    return call


def run_floor(benchmark, target: Target, contract) -> None:  # type: ignore[no-untyped-def]
    kernel = kernel_named(target.subject)
    size = target.size
    # the floor reads as many bytes as an implementation of its row's contract moves: "% of floor" is per contract
    elements = _floor_elements(contract, target)
    call = _ready_floor(kernel, target.device, elements)
    benchmark(call)
    benchmark.extra_info.update(
        kind="floor",
        implementation=f"floor:{kernel.name}",
        contract=target.contract,
        parameters=contract.parameters_text,
        device=target.device,
        dtype=target.dtype,
        size=size.name,
        batch=size.batch,
        tokens=size.tokens,
        bytes=4 * elements,
    )
