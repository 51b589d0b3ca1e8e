"""The train stage traces the train side's KernelBench modules ahead (in a spawned process, while the op
engine fits in another): the program model's data then finds every one of them cached, and nothing of the test
side is traced. Real sandboxed traces of real KernelBench modules."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit.test_programs_predict import KERNELBENCH, _tiny_kernelbench


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="shared KernelBench data not present")
def test_traced_ahead_modules_are_the_ones_the_fit_reads(tmp_path: Path) -> None:
    import pandas as pd

    from components.programs import kernelbench_data
    from components.training.stage import _beside, _trace_side

    measurements, kernels = _tiny_kernelbench(problems=4)
    # The adapter leaves ids to the ingest merge; the canonical table has them.
    measurements = measurements.assign(measurement_id=[f"m{i}" for i in range(len(measurements))])
    canonical = tmp_path / "data" / "canonical"
    canonical.mkdir(parents=True)
    measurements.to_parquet(canonical / "measurements.parquet", index=False)
    kernels.to_parquet(canonical / "kernels.parquet", index=False)
    settings = SimpleNamespace(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    held = sorted(kernels["kernel_id"])[-1]  # one module only on the test side
    train_side = measurements[measurements["kernel_id"] != held].assign(source="kernelbench")
    # as the train stage runs it: in a spawned process beside the fits (its lines come back with the result)
    with _beside(_trace_side, train_side, settings) as job:
        lines = job.result()
    assert lines and lines[0].startswith(f"tracing {kernels['kernel_id'].nunique() - 1} KernelBench modules")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the fit traced a module the train stage had not traced ahead")

    original = kernelbench_data.trace_many
    kernelbench_data.trace_many = refuse
    try:
        data = kernelbench_data.load_kernelbench(train_side, kernels, settings.cache_dir)
    finally:
        kernelbench_data.trace_many = original
    assert set(data.traces) == set(train_side["kernel_id"]) and held not in data.traces
    cache = pd.read_parquet(kernelbench_data.cache_path(settings.cache_dir))
    assert len(cache) == train_side["kernel_id"].nunique()


def test_work_beside_runs_in_another_process_and_stops_when_the_block_fails() -> None:
    import os
    import time

    from components.training.stage import _beside

    with _beside(os.getpid) as job:
        assert job.result() != os.getpid()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the training failed"), _beside(time.sleep, 60) as job:
        time.sleep(1)  # the child is running its 60 s
        raise RuntimeError("the training failed")
    assert time.monotonic() - started < 30, "the block's failure waited for the work beside it"


def test_calls_in_turn_share_one_process_and_a_later_one_reads_what_an_earlier_left(tmp_path: Path) -> None:
    """The traces' process fits the roofline basis after tracing: the calls run in order in one spawned
    process, each with its own future."""
    import os

    from components.training.stage import _beside_in_turn

    marker = tmp_path / "traced"
    with _beside_in_turn(
        (marker.write_text, "cached"), (marker.read_text,), (os.getpid,), (os.getpid,)
    ) as jobs:
        written, read, first, second = (job.result() for job in jobs)
    assert written == len("cached") and read == "cached"
    assert first == second != os.getpid()
