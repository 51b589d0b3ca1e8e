"""Generated sections of a Markdown file: the text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``.

Each bench command owns one named block of the README and rewrites only it, so a run of one split family never
erases another's figures.
"""

from __future__ import annotations

from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def check_marked_block(path: Path, name: str) -> None:
    """ValueError naming ``path`` when it exists but lacks exactly one ``name`` block (a new file is fine)."""
    start_marker, end_marker = markers(name)
    text = Path(path).read_text() if Path(path).is_file() else ""
    start, end = text.find(start_marker), text.find(end_marker)
    if text and (start < 0 or end < start or text.count(start_marker) > 1):
        raise ValueError(
            f"{path} has no single {start_marker} ... {end_marker} section: add both markers "
            "(on their own lines, in that order) where the generated table goes"
        )


def write_marked_block(path: Path, name: str, section: str) -> None:
    """Replace the ``name`` block of ``path`` with ``section`` atomically (a missing file gets just the
    block)."""
    from components.common.atomic import atomic_write

    check_marked_block(path, name)
    start_marker, end_marker = markers(name)
    text = Path(path).read_text() if Path(path).is_file() else ""
    block = f"{start_marker}\n{section.rstrip()}\n{end_marker}"
    start, end = text.find(start_marker), text.find(end_marker)
    new = block + "\n" if not text else text[:start] + block + text[end + len(end_marker) :]
    atomic_write(Path(path), lambda tmp: tmp.write_text(new))
