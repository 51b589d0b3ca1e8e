"""A CLI that starts fast: what each path imports, checked in a fresh interpreter (not a timing test).

``import kernelcast.cli`` (and so ``--help``) loads no heavy library, not even pydantic-settings;
a bad ``--device`` is refused from the device catalog alone, before numpy, pandas or any model library loads.
"""

from __future__ import annotations

import json
import subprocess
import sys

from kernelcast.settings import PROJECT_ROOT

HEAVY = (
    "torch",
    "ray",
    "mlflow",
    "prefect",
    "great_expectations",
    "pandas",
    "numpy",
    "pyarrow",
    "sklearn",
    "lightgbm",
    "transformers",
    "peft",
    "fastapi",
    "matplotlib",
)


def _loaded_after(code: str, env_home: str) -> dict:
    probe = (
        "import json, sys\n"
        f"{code}\n"
        f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), "
        "'settings': 'pydantic_settings' in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT_ROOT,
        env={"KERNELCAST_HOME": env_home, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_cli_loads_nothing_heavy(tmp_path) -> None:
    loaded = _loaded_after("import kernelcast.cli", str(tmp_path))
    assert loaded == {"heavy": [], "settings": False}


def test_help_loads_nothing_heavy(tmp_path) -> None:
    code = (
        "import sys\nsys.argv = ['kernelcast', '--help']\nfrom kernelcast.cli import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(code, str(tmp_path))["heavy"] == []


def test_unknown_device_is_refused_before_numpy_and_pandas(tmp_path) -> None:
    argv = ["kernelcast", "predict", "--op", "gemm", "--shape", "M=64,N=64,K=64", "--device", "NOPE"]
    code = (
        f"import sys\nsys.argv = {argv!r}\nfrom kernelcast.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 2, exc.code"
    )
    assert _loaded_after(code, str(tmp_path)) == {"heavy": [], "settings": False}


def test_a_bad_shape_is_refused_before_numpy_and_pandas(tmp_path) -> None:
    argv = ["kernelcast", "predict", "--op", "gemm", "--shape", "M=64,N=64,K=-1", "--device", "H100"]
    code = (
        f"import sys\nsys.argv = {argv!r}\nfrom kernelcast.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 2, exc.code"
    )
    assert _loaded_after(code, str(tmp_path))["heavy"] == []
