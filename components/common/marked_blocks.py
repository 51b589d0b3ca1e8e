"""Generated sections of a Markdown file: the text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``.

Each bench command owns one named block of the README and rewrites only it, so a run of one split family never
erases another's figures. Every writer of such a block goes through ``write_marked_block``.
"""

from __future__ import annotations

from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def check_marked_block(path: Path, name: str) -> str | None:
    """The text of ``path`` when it can take the ``name`` block (None when the file does not exist yet: it
    gets just the block); ValueError naming the file when it is not a file, lacks the two markers in order,
    or has them twice. Checked before a long run, so a bad target fails before the work."""
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    start_marker, end_marker = markers(name)
    text = path.read_text()
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(
            f"{path} has no single {start_marker} ... {end_marker} section: add both markers "
            "(on their own lines, in that order) where the generated section goes"
        )
    if text.count(start_marker) > 1 or text.count(end_marker) > 1:
        raise ValueError(f"{path} has more than one {start_marker} ... {end_marker} section: keep one")
    return text


def write_marked_block(path: Path, name: str, section: str) -> None:
    """Replace the ``name`` block of ``path`` with ``section`` atomically (a missing file gets just the
    block); the rest of the file is left byte for byte."""
    from components.common.atomic import atomic_write

    text = check_marked_block(path, name)
    start_marker, end_marker = markers(name)
    block = f"{start_marker}\n{section.rstrip()}\n{end_marker}"
    if text is None:
        new = block + "\n"
    else:
        start, end = text.find(start_marker), text.find(end_marker)
        new = text[:start] + block + text[end + len(end_marker) :]
    atomic_write(Path(path), lambda tmp: tmp.write_text(new))
