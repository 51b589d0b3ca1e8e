"""Adding data never loses data: each ingest replaces only its own source's (or run's) rows.

Real adapters on small excerpts of the real public files (upstream layout, cut into tmp_path) and
on copies of the committed profiled run; the kill test runs the real CLI in a subprocess and
SIGKILLs it at the fault-injection points of ``components.ingest.run`` (test-only hooks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from components.ingest.run import FAULT_ENV, FAULT_POINTS, PARTS_DIR, TABLES
from components.ingest.stage import IngestInputs, ingest_stage
from kernelcast.settings import DEFAULT_DATASETS_DIR, PROJECT_ROOT

PIPEWEAVE = DEFAULT_DATASETS_DIR / "pipeweave"
GPUFLOPBENCH = DEFAULT_DATASETS_DIR / "gpuflopbench"
PROFILED_RUN = PROJECT_ROOT / "profiled-data" / "h100-sxm-2026-11-22"
ROWS = 8
PW_FILES = (
    "dataset/gemm_fp8_train.csv",
    "dataset/gemm_fp8_test.csv",
    "pipetuning_test/moe_dse/moe_dse_A100_99.csv",
    "pipetuning_test/demo/topk_underperforming_A100.csv",
    "dataset/collective/A100/all_reduce.csv",
)

pytestmark = pytest.mark.skipif(
    not (PIPEWEAVE.is_dir() and GPUFLOPBENCH.is_dir() and PROFILED_RUN.is_dir()),
    reason="public datasets bundle or profiled-data not present",
)


def _cut(src_root: Path, dst_root: Path, rel: str, rows: int = ROWS) -> None:
    frame = pd.read_csv(src_root / rel, dtype=str, keep_default_na=False, nrows=rows)
    (dst_root / rel).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(dst_root / rel, index=False)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small real excerpts: PipeWeave, gpuFLOPBench (and a shorter gpuFLOPBench), two profiled runs."""
    base = tmp_path_factory.mktemp("sources")
    pw = base / "pipeweave"
    for rel in PW_FILES:
        _cut(PIPEWEAVE, pw, rel)
    (pw / "hardware").mkdir()
    shutil.copy(PIPEWEAVE / "hardware" / "A100.json", pw / "hardware" / "A100.json")
    out = {"pipeweave": pw}
    head = "cuda-profiling/profiling-data.csv"
    lines = (GPUFLOPBENCH / head).read_text().splitlines()
    for name, n in (("gpuflopbench", 6), ("gpuflopbench_short", 3)):
        root = base / name
        (root / "cuda-profiling").mkdir(parents=True)
        (root / head).write_text("\n".join(lines[: n + 1]) + "\n")
        shutil.copytree(GPUFLOPBENCH / "src" / "haccmk-cuda", root / "src" / "haccmk-cuda")
        out[name] = root
    manifest = json.loads((PROFILED_RUN / "manifest.json").read_text())
    for name, suffix, entries in (("run_a", "", 2), ("run_b", "-b2", 1), ("run_a_short", "", 1)):
        run = base / name / ("h100-run-a" if name.startswith("run_a") else "h100-run-b")
        run.mkdir(parents=True)
        timing = [dict(t, run_id=t["run_id"] + suffix) for t in manifest["timing"][:entries]]
        for entry in timing:
            shutil.copy(PROFILED_RUN / entry["file"], run / entry["file"])
        (run / "manifest.json").write_text(json.dumps({**manifest, "timing": timing, "ncu": []}))
        out[name] = base / name
    return out


def _ingest(source: str, root: Path, out: Path, tmp: Path) -> object:
    return ingest_stage(
        IngestInputs(sources=(source,), out_dir=out, datasets_dir=tmp, cache_dir=tmp, from_location=str(root))
    )


def _rows(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "measurements.parquet")


def _by_source(out: Path) -> dict[str, int]:
    return _rows(out).groupby("source").size().to_dict()


def test_second_source_keeps_the_first(roots: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "canonical"
    _ingest("pipeweave", roots["pipeweave"], out, tmp_path)
    pw_rows = _rows(out)
    result = _ingest("gpuflopbench", roots["gpuflopbench"], out, tmp_path)
    after = _rows(out)
    assert set(after["source"]) == {"pipeweave", "gpuflopbench"}
    kept = after[after["source"] == "pipeweave"].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, pw_rows.reset_index(drop=True))
    assert result.kept == ["pipeweave"] and result.replaced == ["gpuflopbench"]
    assert result.total_rows == len(after) == len(pw_rows) + 6
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["by_source"]) == {"pipeweave", "gpuflopbench"} and summary["measurements"] == len(
        after
    )
    kernels = pd.read_parquet(out / "kernels.parquet")
    assert set(after["kernel_id"]) <= set(kernels["kernel_id"])


def test_reingesting_a_source_replaces_only_its_rows(roots: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "canonical"
    _ingest("pipeweave", roots["pipeweave"], out, tmp_path)
    _ingest("gpuflopbench", roots["gpuflopbench"], out, tmp_path)
    pw_before = _rows(out).query("source == 'pipeweave'").reset_index(drop=True)
    _ingest("gpuflopbench", roots["gpuflopbench_short"], out, tmp_path)
    after = _rows(out)
    assert (after["source"] == "gpuflopbench").sum() == 3  # the old 6 rows are gone, not added to
    pd.testing.assert_frame_equal(after.query("source == 'pipeweave'").reset_index(drop=True), pw_before)


def test_a_profiled_run_replaces_only_that_run(roots: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "canonical"
    _ingest("gpuflopbench", roots["gpuflopbench"], out, tmp_path)
    _ingest("kernelcast", roots["run_a"], out, tmp_path)
    _ingest("kernelcast", roots["run_b"], out, tmp_path)
    rows = _rows(out)
    runs = rows[rows["source"] == "kernelcast"].groupby("run_id").size().to_dict()
    assert runs == {"h100-20261122-a": 195, "h100-20261122-b": 195, "h100-20261122-a-b2": 195}
    result = _ingest("kernelcast", roots["run_a_short"], out, tmp_path)  # run a again, one file only
    rows = _rows(out)
    runs = rows[rows["source"] == "kernelcast"].groupby("run_id").size().to_dict()
    assert runs == {"h100-20261122-a": 195, "h100-20261122-a-b2": 195}
    assert (rows["source"] == "gpuflopbench").sum() == 6
    assert result.replaced == ["kernelcast@h100-run-a"]
    assert sorted(p.name for p in (out / PARTS_DIR).iterdir()) == [
        "gpuflopbench",
        "kernelcast@h100-run-a",
        "kernelcast@h100-run-b",
    ]


def test_a_folder_from_before_partitions_is_kept(roots: dict[str, Path], tmp_path: Path) -> None:
    """A canonical folder written by the old single-shot writer (no parts/) is cut per source."""
    from components.devices import load_catalog
    from components.ingest.run import ingest_sources, write_canonical

    out = tmp_path / "canonical"
    write_canonical(ingest_sources(["pipeweave"], {"pipeweave": roots["pipeweave"]}, load_catalog()), out)
    legacy = _rows(out)
    _ingest("gpuflopbench", roots["gpuflopbench"], out, tmp_path)
    after = _rows(out)
    pd.testing.assert_frame_equal(
        after.query("source == 'pipeweave'").reset_index(drop=True), legacy.reset_index(drop=True)
    )


# The ingest stage (what `kernelcast ingest`, the flow and DVC call) in a process of its own.
_INGEST = """
import sys
from pathlib import Path
from components.ingest.stage import IngestInputs, ingest_stage
source, root, out = sys.argv[1:4]
ingest_stage(IngestInputs(sources=(source,), out_dir=Path(out), datasets_dir=Path(out).parent,
                          cache_dir=Path(out).parent, from_location=root))
"""


def _cli(args: list[str], home: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """``--source S --from DIR --out OUT`` through the ingest stage in a subprocess."""
    options = dict(zip(args[::2], args[1::2], strict=True))
    env = {**os.environ, "KERNELCAST_HOME": str(home)}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run(
        [sys.executable, "-c", _INGEST, options["--source"], options["--from"], options["--out"]],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _snapshot(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in (*TABLES, "summary.json")}


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_process_killed_mid_ingest_leaves_complete_tables(
    roots: dict[str, Path], tmp_path: Path, point: str
) -> None:
    """SIGKILL (fault injection) at each point: the folder is the old complete set, or the new one."""
    out = tmp_path / "canonical"
    first = _cli(["--source", "pipeweave", "--from", str(roots["pipeweave"]), "--out", str(out)], tmp_path)
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    killed = _cli(
        ["--source", "gpuflopbench", "--from", str(roots["gpuflopbench"]), "--out", str(out)],
        tmp_path,
        fault=point,
    )
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-2000:])
    state = _snapshot(out)
    if point == "ingest-after-swap":  # killed after the swap: the new complete set
        assert set(_rows(out)["source"]) == {"pipeweave", "gpuflopbench"}
    else:
        assert state == before
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measurements"] == len(_rows(out))
    # The next ingest cleans what the killed one left and completes normally.
    again = _cli(
        ["--source", "gpuflopbench", "--from", str(roots["gpuflopbench"]), "--out", str(out)], tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert _by_source(out) == {
        "pipeweave": len(pd.read_parquet(out / PARTS_DIR / "pipeweave" / "measurements.parquet")),
        "gpuflopbench": 6,
    }
    assert not list(tmp_path.glob(".canonical.*.tmp"))


def test_issue_regression_gpuflopbench_after_pipeweave_via_cli(
    roots: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's steps: `ingest --source pipeweave` then `--source gpuflopbench` kept only the latter."""
    from kernelcast.cli import app

    monkeypatch.setenv("KERNELCAST_HOME", str(tmp_path))
    out = tmp_path / "canonical"
    runner = CliRunner()
    for source in ("pipeweave", "gpuflopbench"):
        done = runner.invoke(
            app, ["ingest", "--source", source, "--from", str(roots[source]), "--out", str(out)]
        )
        assert done.exit_code == 0, done.output
    counts = _by_source(out)
    assert counts["gpuflopbench"] == 6 and counts["pipeweave"] > 0
    assert "kept pipeweave" in done.output


def test_a_folder_holding_other_files_is_refused(roots: dict[str, Path], tmp_path: Path) -> None:
    """The canonical folder is replaced whole, so --out pointing at a user's folder must not wipe it."""
    from components.ingest.base import IngestError

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(IngestError, match=r"holds other files \(notes.txt\)"):
        _ingest("gpuflopbench", roots["gpuflopbench"], out, tmp_path)
    assert (out / "notes.txt").read_text() == "keep me" and not (out / "measurements.parquet").exists()
