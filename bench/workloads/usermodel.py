"""The user's own model: `--workloads my_package.my_module:build` or `--workloads path/to/file.py:build`.

The contract (docs/workloads.md, "Your own model"):
  * FUNCTION is called with no arguments, or with `image_size=` (the --image-size value, or None
    when not given) if it has a parameter of that name (or **kwargs).
  * It returns a dict (or `bench.workloads.modelspec.ModelSpec`, or any object with these attributes):
      model        torch.nn.Module, on CPU, not wrapped; every trainable parameter gets a gradient
      make_batch   make_batch(generator, batch) -> (inputs, targets): CPU tensors with dim 0 = batch
                   (DataParallel splits along dim 0), all randomness drawn from `generator`
      loss_fn      loss_fn(model(inputs), targets) -> scalar tensor
      min_batch_per_replica   optional; default 2 if the model has BatchNorm, else 1
      details      optional dict, stored with the results
  * Before the sweep starts the suite counts the parameters and runs one forward/backward on a
    batch of 2 on CPU; a broken contract stops it with a ConfigError naming the problem.
A file path is made absolute, and its folder is appended to sys.path (as when running it as a
script), so worker processes import the same file by the same text. A MODULE must be importable
from the directory the sweep runs in, or on PYTHONPATH.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Mapping
from typing import Callable, Iterable, Optional

from bench.config import ConfigError

# torch is imported where a model is built, not here: reports call display_name and stay torch-free.

REQUIRED = ("model", "make_batch", "loss_fn")
OPTIONAL = ("min_batch_per_replica", "details")
FORM = "expected MODULE:FUNCTION (e.g. my_package.my_module:build) or PATH.py:FUNCTION"


def is_user_text(text: str) -> bool:
    return ":" in text


def _split(text: str) -> tuple[str, str]:
    where, _, func = text.rpartition(":")
    if not where or not func.isidentifier():
        raise ConfigError(f"--workloads {text}: {FORM}")
    return where, func


def _is_path(where: str) -> bool:
    return where.endswith(".py") or "/" in where or os.sep in where


def _short(workload: str) -> str:
    if not is_user_text(workload):
        return workload
    where, _, func = workload.rpartition(":")
    return f"{os.path.splitext(os.path.basename(where))[0]}:{func}" if _is_path(where) else workload


def display_name(workload: str, among: Iterable[str] = ()) -> str:
    """The name headings, plot titles and plot file names give a workload. A user's model given by path is stored by
    its absolute path (the text every process imports it by, and part of each configuration's key, so resume and
    re-rendering find it), which filled every heading and clipped the overview's title: `/work/main/examples/
    my_model.py:build` reads `my_model:build` (file stem and function). Other names are unchanged. Where another
    workload of `among` (the page's) has the same short form (two my_model.py in different folders), the full text."""
    short = _short(workload)
    if short != workload and any(o != workload and _short(o) == short for o in among):
        return workload
    return short


def normalize(text: str) -> str:
    """The same text with a file path made absolute, so any process can import it by the text alone."""
    where, func = _split(text.strip())
    if _is_path(where):
        where = os.path.abspath(os.path.expanduser(where))
    return f"{where}:{func}"


def _import_file(path: str, text: str):
    if not os.path.isfile(path):
        raise ConfigError(f"--workloads {text}: file {path!r} does not exist")
    # One module name per absolute path, registered in sys.modules (dataclasses and pickle look there).
    name = "bench_user_" + os.path.splitext(os.path.basename(path))[0] + "_" + hashlib.sha1(path.encode()).hexdigest()[:8]
    if name in sys.modules:
        return sys.modules[name]
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import(where: str, text: str):
    try:
        if _is_path(where):
            return _import_file(where, text)
        return importlib.import_module(where)
    except ConfigError:
        raise
    except ModuleNotFoundError as e:
        if e.name and (where == e.name or where.startswith(e.name + ".")):
            raise ConfigError(f"--workloads {text}: no module named {e.name!r} (run from the folder that holds it, "
                              f"or put it on PYTHONPATH; {FORM})") from e
        raise ConfigError(f"--workloads {text}: importing {where!r} failed: {type(e).__name__}: {e}") from e
    except SyntaxError as e:
        raise ConfigError(f"--workloads {text}: {e.filename} line {e.lineno}: SyntaxError: {e.msg}") from e
    except Exception as e:
        raise ConfigError(f"--workloads {text}: importing {where!r} failed: {type(e).__name__}: {e}") from e


def _required_args(fn: Callable) -> list:
    """The arguments `fn` needs that the suite does not pass (it passes image_size, or nothing)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return []
    return [n for n, p in params.items() if p.default is p.empty and n != "image_size"
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def builders(module) -> list:
    """The functions `module` itself defines (not imports) that the suite could call as a builder: public, and needing
    no argument but image_size. What a hint offers when the function named is not there (nothing is called)."""
    return [n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
            and v.__module__ == module.__name__ and not _required_args(v)]


def _did_you_mean(func: str, module) -> str:
    """'; did you mean build?': close names first; failing those the module's builders (`mymod:nope` got no hint where
    `my_model.py:nobuild` got one, only because 'nope' looks like nothing), at most 5."""
    names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
    offer = difflib.get_close_matches(func, names, n=3) or builders(module)[:5]
    return f"; did you mean {', '.join(offer)}?" if offer else ""


def refuse_bare_path(text: str) -> None:
    """ConfigError for a file given without :FUNCTION (`--workloads examples/my_model.py`), which otherwise read as an
    unknown torchvision model; it names the file's builders where the file imports. Returns if `text` is no file path."""
    text = text.strip()
    if is_user_text(text) or not _is_path(text):
        return
    path = os.path.abspath(os.path.expanduser(text))
    if not os.path.isfile(path):
        raise ConfigError(f"--workloads {text}: file {path!r} does not exist ({FORM})")
    try:
        found = builders(_import_file(path, text))
    except Exception:  # noqa: BLE001 - the hint is extra; `PATH.py:FUNCTION` will show the import's own error
        found = None
    hint = (f"; did you mean {', '.join(f'{text}:{n}' for n in found[:5])}?" if found else
            "; it defines no function that takes no argument but image_size" if found == [] else "")
    raise ConfigError(f"--workloads {text}: a file needs :FUNCTION, the function in it that builds the model{hint} "
                      f"({FORM})")


def load_user_builder(text: str) -> Callable:
    """The builder function named by MODULE:FUNCTION or PATH.py:FUNCTION; ConfigError if it cannot be had."""
    text = normalize(text)
    where, func = _split(text)
    module = _import(where, text)
    builder = getattr(module, func, None)
    if builder is None:
        raise ConfigError(f"--workloads {text}: {where!r} has no function {func!r}{_did_you_mean(func, module)}")
    if not callable(builder):
        raise ConfigError(f"--workloads {text}: {func!r} is a {type(builder).__name__}, not a function")
    return builder


def _call(builder: Callable, text: str, image_size: Optional[int]):
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        params = {}
    takes_size = "image_size" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    required = _required_args(builder)
    if required:
        raise ConfigError(f"--workloads {text}: the function requires argument(s) {', '.join(required)}; "
                          "expected it to take none, or only image_size")
    try:
        return builder(image_size=image_size) if takes_size else builder()
    except Exception as e:
        raise ConfigError(f"--workloads {text}: calling it raised {type(e).__name__}: {e}") from e


def build_user(text: str, image_size: Optional[int] = None):
    """Call the user's builder and check the shape of what it returned (check_spec does the dry run): a ModelSpec."""
    from torch import nn

    from bench.workloads.modelspec import ModelSpec, has_batchnorm
    text = normalize(text)
    result = _call(load_user_builder(text), text, image_size)
    if isinstance(result, ModelSpec):
        got = {k: getattr(result, k) for k in REQUIRED + OPTIONAL}
    elif isinstance(result, Mapping):
        unknown = sorted(set(result) - set(REQUIRED + OPTIONAL))
        if unknown:
            raise ConfigError(f"--workloads {text}: unknown key(s) {', '.join(map(repr, unknown))} in the returned dict; "
                              f"expected {', '.join(REQUIRED + OPTIONAL)}")
        got = dict(result)
    elif all(hasattr(result, k) for k in REQUIRED):
        got = {k: getattr(result, k, None) for k in REQUIRED + OPTIONAL}
    else:
        raise ConfigError(f"--workloads {text}: the function returned a {type(result).__name__}; "
                          f"expected a dict with keys {', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)})")
    missing = [k for k in REQUIRED if got.get(k) is None]
    if missing:
        raise ConfigError(f"--workloads {text}: the returned dict lacks {', '.join(missing)}; expected {', '.join(REQUIRED)}")
    for key in ("make_batch", "loss_fn"):
        if not callable(got[key]):
            raise ConfigError(f"--workloads {text}: {key} is a {type(got[key]).__name__}; expected a function")
    model = got["model"]
    if not isinstance(model, nn.Module):
        raise ConfigError(f"--workloads {text}: model is a {type(model).__name__}; expected a torch.nn.Module")
    minimum = got.get("min_batch_per_replica")
    if minimum is None:
        minimum = 2 if has_batchnorm(model) else 1
    details = {"task": "user", "source": text, "image_size": image_size, **(got.get("details") or {})}
    return ModelSpec(model=model, make_batch=got["make_batch"], loss_fn=got["loss_fn"], task="user",
                     image_size=image_size, min_batch_per_replica=minimum, details=details)
