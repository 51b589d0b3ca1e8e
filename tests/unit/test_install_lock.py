"""`make install`'s installer (infra/install_lock.py): pip's sources handed to the pinned uv."""

from __future__ import annotations

import importlib.util
import re

from components.platform.config import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "infra" / "install_lock.py"


def _module():
    spec = importlib.util.spec_from_file_location("install_lock", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pip_config_is_read_by_pips_precedence() -> None:
    listed = "\n".join(
        [
            "global.find-links='/opt/global-wheels'",
            "global.extra-index-url='file:///a/simple file:///b/simple'",
            "install.find-links='/opt/install-wheels'",
            ":env:.find-links='/opt/env-wheels /opt/more'",
            "global.constraint='/etc/c.txt'",
            "global.timeout='60'",  # not a source: not handed to uv
            "garbage line",
        ]
    )
    settings = _module().parse_pip_config(listed)
    assert settings == {
        "find-links": "/opt/env-wheels /opt/more",
        "extra-index-url": "file:///a/simple file:///b/simple",
        "constraint": "/etc/c.txt",
    }


def test_uv_gets_pips_sources_in_its_own_separators() -> None:
    module = _module()
    env = module.uv_environment(
        {"find-links": "/w1 /w2", "extra-index-url": "file:///a file:///b", "cert": "/etc/ca.crt"}
    )
    assert env["UV_FIND_LINKS"] == "/w1,/w2"
    assert env["UV_EXTRA_INDEX_URL"] == "file:///a file:///b"
    assert env["SSL_CERT_FILE"] == "/etc/ca.crt"
    # pip's resolution over several indexes (the best match over all), and bytecode compiled as pip does
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"
    assert env["UV_COMPILE_BYTECODE"] == "1"


def test_make_install_runs_it_with_a_pinned_uv() -> None:
    module = _module()
    assert re.fullmatch(r"uv==\d+\.\d+\.\d+", module.UV_PIN)
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "$(PY) infra/install_lock.py $(VENV)" in makefile
    assert "pip install -q --disable-pip-version-check -r requirements.lock" not in makefile
