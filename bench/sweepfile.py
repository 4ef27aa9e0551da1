"""Sweep files: a sweep kept as a TOML file instead of a shell line (`./run_bench.sh --config sweeps/x.toml`).

Keys are the flags' names, with dashes or underscores (`bucket-cap-mb` or `bucket_cap_mb`); values are TOML
types: a whole number, a number, a string, true/false, or a list of them for an axis:

    strategies = ["single", "ddp"]
    gpus = [1, 4, 8]
    bucket-cap-mb = [25, 100]
    compile = [false, true]

Flags given on the command line override the file. Every value goes through the same checks as the flag it
names (bench.config); an unknown key, a wrong type or a bad value is a ConfigError naming the file, the key
and what was expected. The standard library's tomllib reads the file (tomli on Python < 3.11).

    values = load("sweeps/ddp-settings.toml")   # {field name: the flag's text form}, checked
"""
from __future__ import annotations

import dataclasses
import difflib

from bench import config
from bench.config import ConfigError, SweepConfig

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

FIELDS = {f.name: f for f in dataclasses.fields(SweepConfig)}
NOT_IN_FILES = {"config": "a sweep file cannot name another"}
EXPECTED = {
    "int": "a whole number", "ints": "a whole number or a list of whole numbers",
    "float": "a number", "floats": "a number or a list of numbers",
    "str": "a string", "names": "a string or a list of strings",
    "bool": "true or false", "bools": "true or false, or a list of them",
}
AT_LEAST_ONE = {"ints": "at least one whole number, e.g. [1, 4]", "floats": "at least one number, e.g. [25]",
                "names": "at least one name, e.g. [\"fp32\"]", "bools": "true, false or both, e.g. [false, true]"}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fits(kind: str, v) -> bool:
    one = {"int": lambda x: isinstance(x, int) and not isinstance(x, bool), "float": _number,
           "str": lambda x: isinstance(x, str), "bool": lambda x: isinstance(x, bool)}
    if kind in one:
        return one[kind](v)
    single = kind[:-1] if kind != "names" else "str"
    items = v if isinstance(v, list) else [v]
    return bool(items) and all(one[single](x) for x in items)


def _text(kind: str, v):
    """The value as its flag would carry it, so that one parser checks both."""
    if kind == "bool":
        return v
    items = v if isinstance(v, list) else [v]
    return ",".join(str(x).lower() if isinstance(x, bool) else repr(x) if isinstance(x, float) else str(x) for x in items)


def load(path: str) -> dict:
    """{SweepConfig field: value as its flag's text} from a TOML sweep file, every value checked on its own."""
    return load_with_keys(path)[0]


def load_with_keys(path: str) -> tuple:
    """load's values, and {SweepConfig field: the key the file spells it with}: for errors found later (blame)."""
    if not path.strip():  # `--config "$SWEEP"` with SWEEP unset: refused, never the default sweep in its place
        raise ConfigError(f"--config {path!r}: an empty name; expected a TOML sweep file (an unset shell variable?)")
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except UnicodeDecodeError as e:  # tomllib decodes the bytes as UTF-8 first: a binary file, or another encoding
        raise ConfigError(f"--config {path!r} is not UTF-8 text (byte {e.object[e.start:e.start + 1]!r} at offset "
                          f"{e.start}); expected a TOML sweep file") from None
    except FileNotFoundError:
        raise ConfigError(f"--config {path!r}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"--config {path!r} is a folder; expected a TOML sweep file") from None
    except OSError as e:
        raise ConfigError(f"--config {path!r} cannot be read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    if not raw:  # empty, or comments only: refused, never the default sweep in its place
        raise ConfigError(f"{path}: sets nothing (no keys); expected at least one setting, e.g. workloads = [\"synthetic\"]")
    out, seen = {}, {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name in NOT_IN_FILES:
            raise ConfigError(f"{path}: key {key!r}: {NOT_IN_FILES[name]}")
        if name not in FIELDS:
            close = difflib.get_close_matches(name, list(FIELDS), n=3)
            hint = f"; did you mean {', '.join(c.replace('_', '-') for c in close)}?" if close else ""
            raise ConfigError(f"{path}: unknown key {key!r}{hint} (keys are the flags' names: ./run_bench.sh --help)")
        if name in seen:
            raise ConfigError(f"{path}: keys {seen[name]!r} and {key!r} name the same flag")
        seen[name] = key
        kind = FIELDS[name].metadata["parse"]
        if value == [] and kind in AT_LEAST_ONE:
            raise ConfigError(f"{path}: key {key!r}: an empty list; expected {AT_LEAST_ONE[kind]} "
                              "(or leave the key out for the default)")
        if isinstance(value, dict) or not _fits(kind, value):
            raise ConfigError(f"{path}: key {key!r}: {value!r} is a {_toml_type(value)}; expected {EXPECTED[kind]}")
        out[name] = _text(kind, value)
    check(path, out, seen)
    return out, seen


def check(path: str, values: dict, keys: dict) -> None:
    """Each value through its flag's parser and checks, alone, so that an error names the file's key."""
    for name, text in values.items():
        try:
            config.check_values(SweepConfig(**{name: config.parse_value(name, FIELDS[name].metadata["parse"], text)}))
        except ConfigError as e:
            raise ConfigError(_at_key(path, keys[name], name, str(e))) from None


def _at_key(path: str, key: str, name: str, message: str) -> str:
    """A flag's message as the file's: `--steps: 0 is not allowed` -> `x.toml: key 'steps': 0 is not allowed`."""
    prefix = config.flag(name) + ": "
    return f"{path}: key {key!r}: " + (message[len(prefix):] if message.startswith(prefix) else message)


def blame(path: str, from_file: dict, error: ConfigError) -> ConfigError:
    """An error found once the flags are put together (a flag that needs another, one the device cannot do), named
    by the file's key where the flag it starts with came from the file: {field: key} lists those, the command
    line's own flags left out. Otherwise the error as it was."""
    message = str(error)
    for name, key in from_file.items():
        if message.startswith((config.flag(name) + ": ", config.flag(name) + " ")):
            return type(error)(_at_key(path, key, name, message))
    return error


def _toml_type(v) -> str:
    return {bool: "boolean", int: "whole number", float: "number", str: "string", list: "list",
            dict: "table"}.get(type(v), type(v).__name__)
