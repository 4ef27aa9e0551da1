"""The user's own model by name: the short name reports give a model given by path (trial B: the absolute path filled
every heading and clipped the overview plot's title), and the hints for a path without :FUNCTION and for a module's
missing function (trial B: 'unknown model' plus the torchvision blurb; no 'did you mean' for `mymod:nope`)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.config import ConfigError
from bench.workloads import models, usermodel

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "my_model.py"


def test_a_path_without_function_is_refused_naming_the_missing_function_and_the_files_builders(monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as e:
        models.resolve_workload_name("examples/my_model.py")
    text = str(e.value)
    assert "a file needs :FUNCTION" in text and "did you mean examples/my_model.py:build?" in text
    assert "unknown model" not in text and "torchvision" not in text


def test_a_path_without_function_to_a_missing_file_says_the_file_is_missing(tmp_path):
    with pytest.raises(ConfigError, match=r"file '.*nowhere\.py' does not exist"):
        models.resolve_workload_name(str(tmp_path / "nowhere.py"))


def test_a_file_with_no_callable_builder_says_so(tmp_path):
    path = tmp_path / "only_helpers.py"
    path.write_text("def make_batch(g, batch):\n    return None\n")
    with pytest.raises(ConfigError, match=r"a file needs :FUNCTION.*defines no function that takes no argument"):
        models.resolve_workload_name(str(path))


def test_a_modules_missing_function_offers_its_builders_as_a_path_does(tmp_path, monkeypatch):
    (tmp_path / "mymod_names_test.py").write_text(EXAMPLE.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mymod_names_test", raising=False)
    try:
        for text in ("mymod_names_test:nope", f"{tmp_path / 'mymod_names_test.py'}:nope"):
            with pytest.raises(ConfigError, match=r"has no function 'nope'; did you mean build\?"):
                usermodel.load_user_builder(text)
    finally:
        sys.modules.pop("mymod_names_test", None)
