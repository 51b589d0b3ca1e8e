"""Helpers shared by the integration tests that drive the real CLI in-process."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner, Result


def train_and_register(runner: CliRunner, args: list[str], out: Path) -> tuple[Result, str]:
    """``kernelcast train ARGS --out OUT``; stops the Ray this driver started (never ``ray stop``).

    Returns the result and the registered version (asserting the command succeeded and registered).
    """
    import ray

    from kernelcast.cli import app

    try:
        trained = runner.invoke(app, ["train", *args, "--out", str(out)])
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert trained.exit_code == 0, trained.output
    match = re.search(r"registered: models:/kernelcast/(\d+)", trained.output)
    assert match, trained.output
    return trained, match.group(1)
