"""Does every KernelBench module trace, or name why not? The tracer over every bundled problem text.

Every KernelBench module the bundle holds (levels 1-3, each problem tree: v0.0 and v0.1+) is traced in the
sandbox on fake tensors, as the program model's fit and ``kernelcast predict MODULE.py`` trace it (the trace
cache answers texts it already holds: pass a copy of a state's ``cache`` to spare the cold traces). Counts:
traced; not traced with a named reason (its class and its one-line error); and failures that name none -- no
reason class, an empty error, or an error that is a traceback rather than a sentence.

Usage (from the repository root):
  KERNELCAST_HOME=/tmp/home python benchmarks/kernelbench_traces.py --cache DIR [--root DATASET] [--level 3]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def unnamed(error: str | None, reason: str | None) -> bool:
    """A failure that does not say why: no reason class, no error, or a traceback for its error."""
    text = (error or "").strip()
    return not reason or not text or "Traceback (most recent call last)" in text or "\n  File " in text


def main() -> None:
    from components.devices import load_catalog
    from components.ingest.kernelbench import ingest
    from components.programs.kernelbench_data import cached_traces, module_texts

    parser = argparse.ArgumentParser(description=__doc__)
    root = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "kernelbench"
    parser.add_argument("--root", type=Path, default=root)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--level", default=None, help="one level only (1, 2 or 3); all when left out")
    ns = parser.parse_args()
    kernels = ingest(ns.root, load_catalog()).kernels.drop_duplicates("kernel_id").set_index("kernel_id")
    programs = kernels["program"].astype(str)
    chosen = programs.str.startswith(f"level{ns.level}/") if ns.level else programs.str.startswith("level")
    texts = module_texts(kernels.index[chosen], kernels)
    by_text: dict[str, str] = {}
    for kid, text in texts.items():  # one trace per distinct text (trees share unchanged problems)
        by_text.setdefault(text, kid)
    traces = cached_traces({kid: text for text, kid in by_text.items()}, ns.cache, log=print)
    print(f"{len(texts)} KernelBench modules with a bundled source, {len(by_text)} distinct texts")
    failed = {kid: t for kid, t in traces.items() if not t.ok}
    print(
        f"traced: {len(traces) - len(failed)}; not traced, reason named: "
        f"{sum(not unnamed(t.error, t.reason) for t in failed.values())}; "
        f"no reason named: {sum(unnamed(t.error, t.reason) for t in failed.values())}"
    )
    for (reason, first), n in Counter(
        (t.reason, (t.error or "").splitlines()[0][:100] if t.error else "") for t in failed.values()
    ).most_common():
        print(f"  {n:3d} {reason}: {first}")
    for kid, t in sorted(failed.items()):
        mark = "NO REASON" if unnamed(t.error, t.reason) else "named"
        print(f"  {mark:9s} {kernels.at[kid, 'name']}: {t.reason}: {(t.error or '')[:200]!r}")


if __name__ == "__main__":
    main()
