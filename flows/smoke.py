"""A small end-to-end flow that proves the service wiring: Prefect orchestrates, Ray executes.

``square_sum_flow`` maps a task over its inputs; each task reports the PID of the process it ran
in, so a caller can check the tasks really ran in Ray workers and not in the flow's process.
Used by the integration tests and as the first thing to run against a new cluster:

    python -m flows.smoke 1 2 3
"""

from __future__ import annotations

import os
import sys
from typing import TypedDict

from prefect import flow, task

from kernelcast.settings import Settings, get_settings


class SquareResult(TypedDict):
    value: int
    square: int
    pid: int


class SquareSumReport(TypedDict):
    squares: list[int]
    total: int
    task_pids: list[int]
    flow_pid: int


@task
def square(value: int) -> SquareResult:
    return {"value": value, "square": value * value, "pid": os.getpid()}


@flow(name="square-sum", log_prints=False)
def square_sum_flow(values: list[int]) -> SquareSumReport:
    """Square every value in parallel on the flow's task runner and sum the squares."""
    results: list[SquareResult] = square.map(values).result()
    squares = [r["square"] for r in results]
    return {
        "squares": squares,
        "total": sum(squares),
        "task_pids": [r["pid"] for r in results],
        "flow_pid": os.getpid(),
    }


def run_square_sum(values: list[int], settings: Settings | None = None) -> SquareSumReport:
    """Run the flow with its tasks on Ray (the configured cluster or a local one).

    Expects a Prefect API already configured (``flows.runtime.prefect_server`` or a test harness).
    """
    from flows.runtime import ray_task_runner

    settings = settings or get_settings()
    return square_sum_flow.with_options(task_runner=ray_task_runner(settings))(values)


def main(argv: list[str]) -> None:
    from flows.runtime import prefect_server

    settings = get_settings()
    with prefect_server(settings):
        report = run_square_sum([int(a) for a in argv] or [1, 2, 3, 4], settings)
    print(report)


if __name__ == "__main__":
    main(sys.argv[1:])
