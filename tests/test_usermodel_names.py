"""The user's own model by name: the short name reports give a model given by path (trial B: the absolute path filled
every heading and clipped the overview plot's title), and the hints for a path without :FUNCTION and for a module's
missing function (trial B: 'unknown model' plus the torchvision blurb; no 'did you mean' for `mymod:nope`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config import ConfigError
from bench.workloads import models, usermodel

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "my_model.py"


def test_a_model_given_by_path_is_shown_by_file_stem_and_function_while_its_stored_name_stays_whole(monkeypatch):
    monkeypatch.chdir(REPO)
    stored = models.resolve_workload_name("examples/my_model.py:build")
    assert stored == f"{EXAMPLE}:build"   # what processes import and configuration keys hold: unchanged
    assert usermodel.display_name(stored) == "my_model:build"
    assert usermodel.display_name(stored, [stored, "resnet18"]) == "my_model:build"


def test_other_names_are_shown_as_they_are():
    for name in ("resnet18", "transformer", "synthetic", "my_pkg.nets:build"):
        assert usermodel.display_name(name) == name


def test_two_models_whose_short_names_collide_keep_their_full_names():
    a, b, mod = "/x/my_model.py:build", "/y/my_model.py:build", "my_model:build"
    assert usermodel.display_name(a, [a, b]) == a and usermodel.display_name(b, [a, b]) == b
    assert usermodel.display_name(a, [a, mod]) == a   # a module of the same name: the short form would be ambiguous
    assert usermodel.display_name(a, [a, "/y/other.py:build"]) == "my_model:build"


def test_the_display_name_imports_no_torch():
    """Reports render without torch; display_name must be callable from them without importing it."""
    code = ("import sys; from bench.workloads.usermodel import display_name; "
            "print(display_name('/a/b.py:f'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["b:f", "False"]


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
