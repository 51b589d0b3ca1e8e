"""The HIP runtime header parsed once per sweep: clang precompiles it for the static stage's HIP compiles.

benchmark_hub's ~160 HIP configurations are two sources compiled under different ``-D`` tuning macros, each
starting with ``#include <hip/hip_runtime.h>`` (~69,000 preprocessed lines). clang's front end spent most of
each compile parsing that header (``-ftime-trace``: ~70% of a ~0.7 s compile; ~0.28 s with the header
precompiled). Inside :func:`header_pch`, a source that starts with that include is compiled with a
precompiled header of it, built once per option set (the ``-D`` macros aside: the header reads none of
them) into a folder that lives as long as the block; the source still includes the header, which its
include guard then skips. Same assembler text, checked byte for byte on every configuration the stage
compiles (the static table equal). A compile that fails with the precompiled header (or a header that
does not build) is done again without it, so a failure is the plain compile's, diagnostics and all.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HEADER = "#include <hip/hip_runtime.h>\n"
_FIRST_INCLUDE = re.compile(r'\s*#\s*include\s*[<"]hip/hip_runtime\.h[>"]')
_LOCK = threading.Lock()
_STATE: dict[str, object] = {}  # 'folder': the block's folder; key -> Path of a built header, or None


@contextmanager
def header_pch() -> Iterator[None]:
    """Within this block, HIP compiles whose source starts with the runtime header use it precompiled."""
    with tempfile.TemporaryDirectory(prefix="kc-hip-pch-") as folder:
        with _LOCK:
            _STATE.clear()
            _STATE["folder"] = Path(folder)
        try:
            yield
        finally:
            with _LOCK:
                _STATE.clear()


def pch_args(clang: str, options: list[str], source: str, timeout_s: float) -> list[str]:
    """clang arguments that load the precompiled runtime header for this compile, or none (outside
    :func:`header_pch`, a source that does not start with the header, or a header that did not build)."""
    folder = _STATE.get("folder")
    if not isinstance(folder, Path) or not _FIRST_INCLUDE.match(source):
        return []
    shared = [o for o in options if not o.startswith("-D")]
    key = hashlib.sha256("\0".join([clang, *shared, _HEADER]).encode()).hexdigest()[:24]
    with _LOCK:  # one thread builds a header; the others wait for it
        if key not in _STATE:
            _STATE[key] = _build(clang, shared, folder / key, timeout_s)
        built = _STATE[key]
    return ["-Xclang", "-include-pch", "-Xclang", str(built)] if isinstance(built, Path) else []


def _build(clang: str, options: list[str], stem: Path, timeout_s: float) -> Path | None:
    header, out = stem.with_suffix(".hip"), stem.with_suffix(".pch")
    header.write_text(_HEADER)
    try:
        proc = subprocess.run(
            [clang, *options, "-Xclang", "-emit-pch", str(header), "-o", str(out)],
            capture_output=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out if proc.returncode == 0 and out.is_file() else None


__all__ = ["header_pch", "pch_args"]
