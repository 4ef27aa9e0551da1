"""Sweep files: `--config FILE.toml` takes the flags' names, the command line overrides it, and an unknown key,
a wrong type or a bad value is exit 2 naming the file, the key and what was expected. The shipped sweeps/
resolve on a CPU and on an 8-GPU machine (each also runs, in its CPU form, inside another test: quick-cpu in
test_sweep's sweep, reference in test_voc_e2e, ddp-settings in test_workloads' PowerSGD run)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bench import cli, options
from bench.sweep import plan
from bench.sweep.plan import Machine

REPO = Path(__file__).resolve().parents[1]
CPU2 = Machine(cuda_devices=0, cpu_cores=2)
GPU8 = Machine(cuda_devices=8, cpu_cores=64, gpu_names=("NVIDIA H100",) * 8, gpu_capabilities=((9, 0),) * 8)


@pytest.fixture
def machine(monkeypatch):
    chosen = {"m": CPU2}
    monkeypatch.setattr(plan, "detect_machine", lambda: chosen["m"])
    return chosen


def _toml(tmp_path, text: str) -> str:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return str(path)


def test_a_file_sets_what_its_keys_name_and_the_command_line_overrides_it(tmp_path, machine):
    f = _toml(tmp_path, 'strategies = ["single", "ddp"]\nworkloads = "synthetic"\nbucket-cap-mb = [25, 100.5]\n'
                        'static_graph = [false, true]\nsteps = 4\ntimeout = 30\ncheck-equivalence = true\n')
    cfg, given, _ = options.prepare(["--config", f, "--steps", "6", "--store", str(tmp_path / "s.sqlite")])
    assert cfg.strategies == ("single", "ddp") and cfg.workloads == ("synthetic",)
    assert cfg.bucket_cap_mb == (25.0, 100.5) and cfg.static_graph == (False, True) and cfg.timeout == 30.0
    assert cfg.steps == 6, "the command line overrides the file"
    assert cfg.check_equivalence is True
    assert {"strategies", "bucket_cap_mb", "steps", "static_graph"} <= given


@pytest.mark.parametrize("text, expected", [
    ("bucket-cap-mbb = [25]\n", "unknown key 'bucket-cap-mbb'; did you mean bucket-cap-mb?"),
    ("gpus = \"1,4\"\n", "key 'gpus': '1,4' is a string; expected a whole number or a list of whole numbers"),
    ("steps = 2.5\n", "key 'steps': 2.5 is a number; expected a whole number"),
    ("compile = \"yes\"\n", "key 'compile': 'yes' is a string; expected true or false, or a list of them"),
    ("download = 1\n", "key 'download': 1 is a whole number; expected true or false"),
    ("gpus = [0, 2]\n", "key 'gpus': 0 is not allowed; expected a whole number >= 1"),
    ("bucket-cap-mb = nan\n", "key 'bucket-cap-mb': 'nan' is not a finite number"),
    ("timeout = inf\n", "key 'timeout': 'inf' is not a finite number"),
    ("precision = [\"fp8\"]\n", "key 'precision': unknown name 'fp8'"),
    ("gpus = []\n", "key 'gpus': an empty list; expected at least one whole number, e.g. [1, 4] (or leave the key out"),
    ("[ddp]\nbucket-cap-mb = 25\n", "unknown key 'ddp'"),
    ("[gpus]\ncount = 8\n", "key 'gpus': {'count': 8} is a table; expected a whole number or a list of whole numbers"),
    ("steps = 3\nsteps = 4\n", "not valid TOML"),
    ("bucket_cap_mb = [25]\nbucket-cap-mb = [100]\n", "keys 'bucket_cap_mb' and 'bucket-cap-mb' name the same flag"),
    ("config = \"other.toml\"\n", "key 'config': a sweep file cannot name another"),
    # a flag that needs another, an empty list, file or value: the file and its key named all the same
    ('fsdp-offload = ["cpu"]\nstrategies = ["ddp"]\n',
     "key 'fsdp-offload': takes effect with --strategies fsdp or hsdp only; add one, or leave --fsdp-offload out"),
    ('transformer-preset = "tiny"\n',
     "key 'transformer-preset': sets the transformer workload, which --workloads does not name; add transformer"),
    ('workloads = ["Transformer"]\ntransformer-preset = "tiny"\n', "key 'workloads': unknown model 'Transformer'"),
    ('workloads = ["transformer"]\ntransformer-preset = ""\n',
     "key 'transformer-preset': '' is empty; expected a value"),
    ("precision = []\n", "key 'precision': an empty list; expected at least one name"),
    ("compile = []\n", "key 'compile': an empty list; expected true, false or both"),
    ("bucket-cap-mb = []\n", "key 'bucket-cap-mb': an empty list; expected at least one number"),
    ("find-unused-parameters = [true, true]\nstrategies = [\"ddp\"]\n",
     "key 'find-unused-parameters': true,true names an entry twice; expected each entry once"),
    # a folder the report could not be written to, from the file: named by its key as a flag's is (--store alike)
    ('plots-dir = "/proc/nope"\n', "key 'plots-dir': --plots-dir '/proc/nope': cannot create folders under /proc"),
    ("", 'sets nothing (no keys); expected at least one setting, e.g. workloads = ["synthetic"]'),
    ("# the sweep, to be written\n\n", "sets nothing (no keys)"),
])
def test_a_bad_key_type_or_value_is_exit_2_naming_the_file_and_the_key(text, expected, tmp_path, capsys, no_sweep):
    f = _toml(tmp_path, text)
    store = tmp_path / "s.sqlite"
    assert cli.main(["--config", f, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {f}: ") and expected in err, err
    assert not store.exists()


def test_a_missing_file_is_named(tmp_path, capsys, machine):
    assert cli.main(["--config", str(tmp_path / "nope.toml"), "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "--config" in capsys.readouterr().err


def test_a_file_that_is_not_text_is_exit_2_naming_it_not_an_internal_error(tmp_path, capsys, machine):
    f = tmp_path / "sweep.toml"
    f.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")  # a picture saved under the sweep's name
    store = tmp_path / "s.sqlite"
    assert cli.main(["--config", str(f), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --config {str(f)!r} is not UTF-8 text (byte b'\\x89' at offset 0); expected a TOML sweep file\n"
    assert not store.exists()


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_config_name_is_refused_not_replaced_by_the_default_sweep(value, tmp_path, capsys, machine):
    """`--config "$SWEEP"` with SWEEP unset: the default sweep must not run in its place."""
    store = tmp_path / "s.sqlite"
    for argv in (["--config", value], [f"--config={value}"]):
        assert cli.main([*argv, "--store", str(store)]) == 2
        assert f"--config {value!r}: an empty name; expected a TOML sweep file" in capsys.readouterr().err
    assert not store.exists()


@pytest.mark.no_process
@pytest.mark.parametrize("name", ["reference.toml", "quick-cpu.toml", "ddp-settings.toml", "transformer.toml"])
def test_the_shipped_sweeps_resolve_on_a_cpu_and_on_eight_gpus(name, tmp_path, machine):
    extra = ["--voc-root", str(tmp_path)] if name == "reference.toml" else []
    if name == "reference.toml":
        from voc_tree import make_voc_tree
        extra = ["--voc-root", str(make_voc_tree(tmp_path / "voc", n_images=9))]
    args = ["--config", str(REPO / "sweeps" / name), "--store", str(tmp_path / "s.sqlite"), *extra]
    if name != "quick-cpu.toml":  # quick-cpu is the CPU's own sweep (device = "cpu")
        machine["m"] = GPU8
        cfg, _, m = options.prepare(args)
        assert cfg.device == "cuda" and plan.plan(cfg, m)
    machine["m"] = CPU2
    cpu_args = args + (["--gpus", "1,2", "--epochs", "1", "--per-device-batch", "2", "--image-size", "32"]
                       if name == "reference.toml" else ["--gpus", "2"] if name in ("ddp-settings.toml", "transformer.toml") else [])
    cfg, _, m = options.prepare(cpu_args + ["--device", "cpu"])
    assert cfg.device == "cpu" and plan.plan(cfg, m)


def test_the_stored_sweep_is_the_resolved_one_and_its_command_line_names_the_file(tmp_path):
    from conftest import run_bench
    store = tmp_path / "s.sqlite"
    f = _toml(tmp_path, 'strategies = ["single"]\nworkloads = ["synthetic"]\nsynthetic-width = 32\nsynthetic-depth = 1\n'
                        'per-device-batch = 4\nsteps = 2\nwarmup = 0\nrepeats = 1\nreport = false\n')
    p = run_bench(["--config", f, "--store", str(store)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    row = sqlite3.connect(store).execute("SELECT command_line, config_json FROM sweeps").fetchone()
    assert f"--config {f}" in row[0]
    stored = json.loads(row[1])
    assert stored["strategies"] == ["single"] and stored["synthetic_width"] == 32 and stored["steps"] == 2


# ---------------------------------------------------------------- helper-Y1: a file's key named in every error it causes

@pytest.fixture
def no_sweep(monkeypatch, machine):
    """A file that would be let through must fail the test, not start the sweep it sets (or the default one)."""
    def refuse(*a, **k):
        raise AssertionError("the sweep started despite a bad file")
    from bench.sweep import launch, run as sweep_run
    monkeypatch.setattr(sweep_run, "run_sweep", refuse)
    monkeypatch.setattr(launch, "run_config", refuse)


def test_a_flag_the_command_line_gives_is_not_blamed_on_the_file(tmp_path, capsys, no_sweep):
    f = _toml(tmp_path, 'strategies = ["ddp"]\n')
    assert cli.main(["--config", f, "--fsdp-offload", "cpu", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert capsys.readouterr().err.startswith("error: --fsdp-offload: takes effect with --strategies fsdp or hsdp")
