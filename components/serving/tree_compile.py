"""Bulk tree predictions through lleaves: a LightGBM model compiled to machine code by LLVM.

Why a compiled tier: a server or batch job scoring many questions spends most of its time in the trees,
and LightGBM's own predictor is slow per row on one thread. ``benchmarks/tree_compilers.py`` (400 trees
x 63 leaves, 30 features, one thread, a shared 2-core box at load 7-12;
``benchmarks/results/tree_compilers.json``): LightGBM ``Booster.predict`` 48k rows/s, 47 us a single
row; lleaves 1.3.0 229k rows/s, 15 us, compiled in 279 s; lleaves with ``finline=False`` 157k rows/s,
18 us, compiled in 30 s; treelite + tl2cgen 109k, 34 us. The C generator we kept before (256k rows/s,
11 us) was 1.12x / 1.32x lleaves: short of the 2x that would justify hand-written code, so it was
removed. ``finline=False``: a ninth of the compile time for two thirds of the rate -- a new model
version answers bulk batches compiled within a minute, not many. lleaves' scores differ from
LightGBM's by float rounding (1.9e-14), as the numpy walk's do.

A load never waits for a compile: when a registry version is copied locally (``native.flatten_folder``) a
detached process compiles each ``model_<target>.txt`` into ``$KERNELCAST_HOME/cache/lleaves/<hash>.o``
(keyed by the model text and the lleaves version: lleaves itself never checks a cache file's staleness);
until it is there, bulk batches go to LightGBM. Small batches never come here (``native.BULK_ROWS``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# finline=False: lleaves' switch for a ~9x faster compile (see above); raw scores, linked by FlatTrees.
COMPILE_OPTIONS: dict[str, Any] = {"raw_score": True, "finline": False}
_OBJECT_MAGIC = (b"\x7fELF", b"\xcf\xfa\xed\xfe")  # ELF (Linux), Mach-O 64-bit (macOS)
_STALE_MARKER_S = 3600  # a ".building" marker older than this is a compile that died


@functools.cache
def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lleaves")
    except PackageNotFoundError:
        return None


def cache_file(model_file: Path) -> Path | None:
    """Where the compiled copy of ``model_file`` lives (None: lleaves is not installed)."""
    lleaves_version = _version()
    if lleaves_version is None:
        return None
    from components.platform.config import get_settings

    stat = Path(model_file).stat()
    key = (str(model_file), stat.st_mtime_ns, stat.st_size, lleaves_version)
    return get_settings().state_dir / "cache" / "lleaves" / f"{_digest(*key)}.o"


@functools.lru_cache(maxsize=256)
def _digest(model_file: str, mtime_ns: int, size: int, lleaves_version: str) -> str:
    """Hash of the model text (read once per file version: a server asks before every bulk batch until
    the compile is there), the lleaves version, the compile options and the CPU (lleaves compiles for the
    host's instruction set: a state folder shared with another machine must not run this one's code)."""
    digest = hashlib.sha256(Path(model_file).read_bytes())
    digest.update(f"{lleaves_version}|{sorted(COMPILE_OPTIONS.items())}|{_host_cpu()}".encode())
    return digest.hexdigest()[:32]


@functools.cache
def _host_cpu() -> str:
    import lleaves  # noqa: F401  (initialises LLVM)
    import llvmlite.binding as llvm

    return f"{llvm.get_process_triple()}|{llvm.get_host_cpu_name()}|{llvm.get_host_cpu_features().flatten()}"


def load(model_file: Path) -> Any | None:
    """The compiled model when its cache file exists (loading it compiles nothing), else None."""
    cached = cache_file(model_file)
    if cached is None or not cached.is_file():
        return None
    with open(cached, "rb") as handle:
        magic = handle.read(4)
    if magic not in _OBJECT_MAGIC:  # LLVM aborts the whole process on a file it cannot read: refuse first
        raise ValueError(f"{cached}: not an object file (delete it to compile again)")
    import lleaves

    model = lleaves.Model(model_file=str(model_file))
    model.compile(cache=str(cached), **COMPILE_OPTIONS)
    return model


def compile_now(model_file: Path) -> Path | None:
    """Compile ``model_file`` into its cache file (atomically: lleaves writes a temporary name that is
    then renamed, so a reader never loads half a file). The cache file, or None without lleaves."""
    cached = cache_file(model_file)
    if cached is None:
        return None
    if not cached.is_file():
        import lleaves

        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
        lleaves.Model(model_file=str(model_file)).compile(cache=str(partial), **COMPILE_OPTIONS)
        os.replace(partial, cached)
    return cached


def start_background_compile(model_file: Path) -> bool:
    """Compile ``model_file`` in a detached process, once (a fresh ``.building`` marker beside the cache
    file means one is already running). True if started."""
    cached = cache_file(model_file)
    if cached is None or cached.is_file():
        return False
    from components.platform.config import PROJECT_ROOT

    marker = cached.with_name(f"{cached.name}.building")
    try:
        if marker.is_file() and time.time() - marker.stat().st_mtime < _STALE_MARKER_S:
            return False
        cached.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        }
        subprocess.Popen(
            [sys.executable, "-m", "components.serving.tree_compile", str(model_file)],
            env=env,
            cwd=str(PROJECT_ROOT),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return True
    except OSError:
        return False


def _main(argv: list[str]) -> int:
    model_file = Path(argv[0])
    cached = cache_file(model_file)
    try:
        compile_now(model_file)
    finally:
        if cached is not None:
            cached.with_name(f"{cached.name}.building").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
