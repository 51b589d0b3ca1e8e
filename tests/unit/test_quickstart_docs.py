"""The quick start's sample outputs are what its commands print (issue 34: the README's sample had drifted).

``docs/quickstart.md`` pairs each ``kernelcast predict`` command (a ```bash block of one line) with the sample
output right after it (a plain ``` block); ```cuda blocks are the files the commands read (first line
``// NAME: ...``). The test runs every command on the roofline predictor and compares: the kernel tables
exactly (physics and the catalog only: a change there is a change users see), a deployment's lines with
the numbers masked (its fitted costs move with every retraining). ``KERNELCAST_UPDATE_DOCS=1`` rewrites the
samples instead. The README's quick start must only name commands this page checks.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelcast.cli import app

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
PAIR = re.compile(r"```bash\n(kernelcast predict [^\n]*)\n```\n\n```\n(.*?)```\n", re.S)
FILE = re.compile(r"```cuda\n(// (\S+?):[^\n]*\n.*?)```\n", re.S)
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
# The commit the constants were fitted at moves with every refit.
COMMIT = re.compile(r"commit [0-9a-f]{7,40}")


def _print(command: str, cwd: Path, monkeypatch) -> str:
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("COLUMNS", "250")
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, (command, result.output)
    return result.output


def _masked(text: str) -> list[str]:
    return [NUMBER.sub("#", COMMIT.sub("commit #", line)).rstrip() for line in text.splitlines()]


def test_quickstart_samples_are_what_the_commands_print(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path / "home"))
    text = QUICKSTART.read_text()
    for source, name in FILE.findall(text):
        (tmp_path / name).write_text(source)
    pairs = PAIR.findall(text)
    assert len(pairs) >= 3, "docs/quickstart.md lost its command + sample pairs"
    updated = text
    for command, sample in pairs:
        printed = _print(command, tmp_path, monkeypatch)
        if os.environ.get("KERNELCAST_UPDATE_DOCS") == "1":
            updated = updated.replace(
                f"{command}\n```\n\n```\n{sample}```", f"{command}\n```\n\n```\n{printed}```"
            )
        elif "--llm" in command:
            assert _masked(printed) == _masked(sample), (command, printed)
        else:
            assert printed == sample, (command, printed)
    if updated != text:
        QUICKSTART.write_text(updated)


def test_the_readme_quick_start_names_only_checked_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    # the commands that need no trained champion: --model roofline, and deployments (the composition)
    commands = [
        c for c in lines if c.startswith("kernelcast predict") and ("--model roofline" in c or "--llm" in c)
    ]
    checked = {command for command, _ in PAIR.findall(QUICKSTART.read_text())}
    assert commands, "the README's quick start has no --model roofline command"
    missing = [c for c in commands if c not in checked]
    if missing:
        pytest.fail(f"README quick start commands without a checked sample in docs/quickstart.md: {missing}")
