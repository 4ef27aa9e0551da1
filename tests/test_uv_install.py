"""The set-up's fast path (scripts/uv_install.py): uv gets the indexes, wheel folders, constraints and certificate that
pip's configuration gives pip, so the venv it makes is the one pip would make from the same places."""
from __future__ import annotations

import os
import sys

from conftest import script_module

uv_install = script_module("scripts/uv_install.py")

# `pip config list` on this project's machines: a PIP_* variable (":env:") and /etc/xdg/pip/pip.conf ("global")
LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/somewhere/else.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/other-wheels'
install.no-index='false'
user.index-url='https://never.example/simple'
not a config line
"""


def test_a_variable_wins_over_a_file_and_every_option_pip_resolves_with_is_handed_to_uv():
    config = uv_install.pip_config(LISTING)
    assert config["find-links"] == "/opt/wheels" and config["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    assert "index-url" not in config  # a section `pip install` does not read ([user]) is left out
    args, env = uv_install.uv_args(config)
    pairs = list(zip(args[::2], args[1::2]))
    assert ("--find-links", "/opt/wheels") in pairs and ("--find-links", "/opt/other-wheels") not in pairs
    assert [v for f, v in pairs if f == "--extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs  # torch's cap on these machines holds under uv
    assert "--no-index" not in args
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}


def test_an_offline_configuration_stays_offline_and_a_trusted_host_is_allowed_over_http():
    args, env = uv_install.uv_args(uv_install.pip_config(
        "global.no-index='true'\nglobal.trusted-host='mirror.local other.local'\nglobal.index-url='http://mirror.local/simple'\n"))
    assert "--no-index" in args and env == {}
    assert args[args.index("--index-url") + 1] == "http://mirror.local/simple"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--allow-insecure-host"] == ["mirror.local", "other.local"]


def test_no_uv_anywhere_is_status_3_so_the_set_up_falls_back_on_pip(tmp_path, monkeypatch):
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert uv_install.main([str(python), "-e", "."]) == 3
    assert uv_install.main([]) == 2
    assert os.path.exists(python)
