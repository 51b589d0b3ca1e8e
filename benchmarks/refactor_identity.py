"""Compare two trees' bench outputs: canonical/feature parquet folders as frames, accuracy JSONs row by row.

Usage (each side built by its own tree, see docs/refactor-identity.md):
  python benchmarks/refactor_identity.py tables BEFORE_DIR AFTER_DIR   # every *.parquet under both folders
  python benchmarks/refactor_identity.py json BEFORE.json AFTER.json   # `bench accuracy --json` outputs

Tables are compared column by column in file order (a reordered file shows as differing rows), NaN/NA equal
to NaN/NA; numbers exactly. Prints each difference and its size; exits 1 when any answer differs (timings,
which are wall-clock, are reported but not counted).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

NA = "\x00NA"


def column_difference(before: pd.Series, after: pd.Series) -> str | None:
    """How a column differs (rows, relative size), None when equal."""
    if pd.api.types.is_numeric_dtype(before) and pd.api.types.is_numeric_dtype(after):
        x, y = before.astype(float).to_numpy(), after.astype(float).to_numpy()
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if same.all():
            return None
        rel = np.abs(x - y)[~same] / np.maximum(np.abs(x[~same]), 1e-300)
        return f"{int((~same).sum())} rows differ, relative difference median {np.nanmedian(rel):.3g}"
    x = before.astype(object).where(before.notna(), NA).astype(str)
    y = after.astype(object).where(after.notna(), NA).astype(str)
    same = (x == y).to_numpy()
    if same.all():
        return None
    first = int(np.flatnonzero(~same)[0])
    return f"{int((~same).sum())} rows differ, e.g. {before.iloc[first]!r} vs {after.iloc[first]!r}"


def compare_tables(before: Path, after: Path) -> int:
    files = {p.relative_to(before) for p in before.rglob("*.parquet")}
    files_after = {p.relative_to(after) for p in after.rglob("*.parquet")}
    differences = len(files ^ files_after)
    if files ^ files_after:
        print(f"files on one side only: {sorted(map(str, files ^ files_after))}")
    for name in sorted(files & files_after):
        x, y = pd.read_parquet(before / name), pd.read_parquet(after / name)
        print(f"{name}: rows {len(x)} / {len(y)}, columns {x.shape[1]} / {y.shape[1]}")
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            print(f"  columns or row count differ: {sorted(set(x.columns) ^ set(y.columns))}")
            differences += 1
            continue
        for column in x.columns:
            if str(x[column].dtype) != str(y[column].dtype):
                print(f"  {column}: dtype {x[column].dtype} / {y[column].dtype}")
                differences += 1
            why = column_difference(x[column].reset_index(drop=True), y[column].reset_index(drop=True))
            if why:
                print(f"  {column}: {why}")
                differences += 1
    return differences


def compare_json(before: Path, after: Path) -> int:
    x, y = json.loads(before.read_text()), json.loads(after.read_text())

    def key(row: dict) -> tuple:
        return (row["split"], row["family"], row["target"], row["scope"], row["metric"])

    rows_x, rows_y = {key(r): r for r in x["rows"]}, {key(r): r for r in y["rows"]}
    differences = len(set(rows_x) ^ set(rows_y))
    for k in sorted(set(rows_x) ^ set(rows_y)):
        print(f"row on one side only: {k}")
    for k in sorted(set(rows_x) & set(rows_y)):
        if rows_x[k] != rows_y[k]:
            fields = {
                f: (rows_x[k].get(f), rows_y[k].get(f)) for f in rows_x[k] if rows_x[k][f] != rows_y[k].get(f)
            }
            print(f"row {k}: {fields}")
            differences += 1
    if x.get("notes") != y.get("notes"):
        print("notes differ")
        differences += 1
    print(
        f"{len(rows_x)} / {len(rows_y)} rows, {differences} differences (timings: wall-clock, not compared)"
    )
    return differences


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("tables", "json"):
        print(__doc__)
        return 2
    compare = compare_tables if argv[0] == "tables" else compare_json
    differences = compare(Path(argv[1]), Path(argv[2]))
    print("identical" if differences == 0 else f"{differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
