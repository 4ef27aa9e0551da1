"""Every refusal is exit 2 with the value named, before anything is spawned or written: no store, no -wal/-shm,
no run folder, no plot; an existing store byte-identical. Numbers must be finite: `float()` takes nan, inf,
-inf and 1e999, none of which is a count, a size or a time."""
from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import tempfile

import pytest

from bench import cli, config
from bench.store import store

NON_FINITE = ("nan", "inf", "-inf", "1e999")


def _numeric_flags(kinds: tuple) -> list:
    return [f.name for f in dataclasses.fields(config.SweepConfig) if f.metadata["parse"] in kinds]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """The user's folder and the temporary folder, watched: a refusal must leave both as they were, and spawn nothing."""
    home, tmp = tmp_path / "cwd", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))

    def no_spawn(*a, **k):
        raise AssertionError(f"a refused command spawned {a[0] if a else k}")
    monkeypatch.setattr(subprocess, "Popen", no_spawn)
    existing = home / "old.sqlite"
    conn = store.connect(str(existing))
    sid = store.begin_sweep(conn, "./run_bench.sh", "{}", None)
    store.end_sweep(conn, sid, "completed")
    conn.close()

    def snapshot() -> dict:
        # torch itself makes its compile cache folder, $TMPDIR/torchinductor_<user>, when torchvision is first
        # imported (planning reads model sizes): torch's folder, shared by every torch program, not the suite's
        return {str(p.relative_to(tmp_path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
                for p in sorted(tmp_path.rglob("*")) if not str(p.relative_to(tmp_path)).startswith("tmp/torchinductor_")}
    before = snapshot()
    yield home
    assert snapshot() == before, "a refused command created, changed or left a file"


def _refused(argv: list, capsys) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own errors (a choice, a type): exit status 2 as well
        code = e.code
    assert code == 2, argv
    out = capsys.readouterr()
    return out.err + out.out


@pytest.mark.parametrize("name", _numeric_flags(("float", "floats")))
@pytest.mark.parametrize("text", NON_FINITE)
def test_a_non_finite_number_for_a_float_flag_is_refused_naming_it(name, text, sandbox, capsys):
    said = _refused([f"{config.flag(name)}={text}", "--device", "cpu"], capsys)
    assert f"{config.flag(name)}: {text!r} is not a finite number" in said, said


@pytest.mark.parametrize("name", _numeric_flags(("int", "ints")))
@pytest.mark.parametrize("text", ("nan", "inf", "1e999", "2.5"))
def test_a_whole_number_flag_refuses_nan_inf_and_fractions(name, text, sandbox, capsys):
    said = _refused([f"{config.flag(name)}={text}", "--device", "cpu"], capsys)
    assert f"{config.flag(name)}: {text!r} is not a whole number" in said, said


@pytest.mark.parametrize("argv, expected", [
    (["--resume", "last"], "--resume last: there is no store at"),
    (["--resume", "last", "--store", "new/dir/s.sqlite"], "there is no store at"),
    (["--resume", "7", "--store", "old.sqlite"], "sweep 7 is not in the store"),
    (["--resume", "abc", "--store", "old.sqlite"], "--resume 'abc': expected 'last' or a sweep id"),
    (["tune", "--budget", "inf", "--device", "cpu"], "--budget: 'inf' is not a finite number"),
    (["tune", "--budget", "nan", "--device", "cpu"], "--budget: 'nan' is not a finite number"),
    (["tune", "--budget", "0", "--device", "cpu"], "--budget: 0 is not allowed"),
    (["tune", "--gpus", "1", "--device", "cpu"], "no count above 1"),
    (["tune", "--bucket-cap-mb", "nan", "--device", "cpu"], "--bucket-cap-mb: 'nan' is not a finite number"),
    (["compare", "--threshold", "nan"], "--threshold"),
    (["compare", "--threshold", "inf"], "--threshold"),
    (["compare", "--store", "missing.sqlite"], "does not exist"),
    (["ab", "--pairs", "1", "--b-env", "X=1", "--device", "cpu"], "--pairs: 1 is not allowed"),
    (["ab", "--pairs", "nan", "--b-env", "X=1", "--device", "cpu"], "'nan'"),
    (["ab", "--b-args", "--timeout nan", "--device", "cpu"], "--timeout: 'nan' is not a finite number"),
    (["ab", "--b-env", "NOEQUALS", "--device", "cpu"], "--b-env 'NOEQUALS'"),
    (["ab", "--device", "cpu"], "needs a variant B"),
    (["report", "--store", "missing.sqlite"], "does not exist"),
    (["report", "--store", "old.sqlite", "--sweep", "9"], "sweep 9 is not in the store"),
    (["report", "--store", "old.sqlite", "--memory-budget-gib", "0"], "--memory-budget-gib: 0 is not allowed"),
    (["report", "--store", "old.sqlite", "--memory-budget-gib", "nan"], "--memory-budget-gib: 'nan' is not a finite number"),
    (["--repeats", "99999999999999999999", "--device", "cpu"],     # planning that many hung
     "--repeats: 99999999999999999999 is not allowed; expected a whole number >= 1 and <= 1000"),
    (["--noise-repeats", "1001", "--device", "cpu"], "--noise-repeats: 1001 is not allowed"),
    (["--image-size", "99999999999999999999", "--device", "cpu"],   # planned, then its result could not be stored
     "--image-size: 99999999999999999999 is not allowed; expected a whole number >= 1 and <= 9223372036854775807"),
    (["--bucket-cap-mb", "1e300", "--device", "cpu"], "--bucket-cap-mb: 1e+300 is not allowed"),   # DDP's int64 bytes
    (["forecast", "--store", "old.sqlite", "--sweep", "99999999999999999999"],   # past SQLite's INTEGER: in no store
     "sweep 99999999999999999999 is not in the store"),
    (["compare", "--store", "old.sqlite", "--sweep-a", "99999999999999999999"], "sweep 99999999999999999999 is not in"),
    # a report's folder where nothing can be written: the sweep once ran whole, then failed to render (report: exit 3)
    (["--plots-dir", "old.sqlite", "--device", "cpu"], "--plots-dir 'old.sqlite' is a file; expected a folder"),
    (["--report-dir", "/proc/nope", "--device", "cpu"], "--report-dir '/proc/nope': cannot create folders under /proc"),
    (["fit", "--device", "cpu", "--memory-budget-gib", "1", "--report-dir", "old.sqlite"], "--report-dir 'old.sqlite' is a"),
    (["report", "--store", "old.sqlite", "--report-dir", "old.sqlite"], "--report-dir 'old.sqlite' is a file"),
    (["history", "--store", "old.sqlite", "--plots-dir", "old.sqlite"], "--plots-dir 'old.sqlite' is a file"),
    (["--comm-counts", "1", "--device", "cpu"], "--comm-counts: 1 is not allowed"),
    (["--comm-counts", "2", "--no-comm-bench", "--device", "cpu"], "--comm-counts 2: measures the collectives there"),
    (["--comm-counts", "64", "--device", "cpu"], "64 CPU processes asked for"),
    (["forecast", "--store", "old.sqlite", "--against", "last"], "--against 1: expected a sweep later"),
    (["migrate", "--store", "missing.sqlite"], "does not exist"),
    (["selfcheck", "--device", "tpu"], "'tpu'"),
    (["frobnicate"], "unknown command 'frobnicate'"),
])
def test_every_command_refuses_without_writing_or_spawning(argv, expected, sandbox, capsys):
    said = _refused(argv, capsys)
    assert expected in said, said


@pytest.mark.parametrize("argv, flag", [(["--timeout", "-inf", "--device", "cpu"], "--timeout"),
                                        (["--bucket-cap-mb", "-nan", "--device", "cpu"], "--bucket-cap-mb"),
                                        (["tune", "--budget", "-inf", "--device", "cpu"], "--budget"),
                                        (["compare", "--threshold", "-inf"], "--threshold")])
def test_a_negative_non_finite_value_after_a_space_is_refused_as_a_value_not_as_a_missing_one(argv, flag, sandbox, capsys):
    # argparse reads '-inf' as another flag unless it looks like a negative number: the user would be told the flag
    # has no value
    said = _refused(argv, capsys)
    assert f"{flag}: '{argv[argv.index(flag) + 1]}' is not a finite number" in said, said
    assert "expected one argument" not in said


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_commands_help_introduces_it_as_the_user_calls_it(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    usage = capsys.readouterr().out
    assert done.value.code == 0
    expected = "usage: ./run_bench.sh" + ("" if command == "run" else f" {command}")
    assert usage.startswith(expected + " "), usage.splitlines()[:2]
    assert "python -m" not in usage


@pytest.mark.parametrize("argv", [["run", "--device", "cpu"], ["report"], ["compare"], ["history"], ["forecast"], ["migrate"],
                                  ["export"],
                                  ["tune", "--device", "cpu"], ["selfcheck", "--device", "cpu"],
                                  ["ab", "--b-env", "X=1", "--device", "cpu"], ["report", "--store", "old.sqlite"],
                                  ["compare", "--store", "old.sqlite", "--against"]])
def test_a_folder_given_as_the_store_is_called_a_folder_by_every_command(argv, sandbox, capsys):
    (sandbox / "results").mkdir()
    said = _refused([*argv, "--store", "results"] if argv[-1] != "--against" else [*argv, "results"], capsys)
    assert "'results' is a folder" in said or "results' is a folder" in said, said
    assert "does not exist" not in said, said
    (sandbox / "results").rmdir()


@pytest.mark.parametrize("version, argv, expected", [
    ("2.5.1+cu121", ["--strategies", "ddp,fsdp"],
     "--strategies fsdp: needs torch>=2.6 (FSDP2's fully_shard in torch.distributed.fsdp), but this is torch 2.5.1+cu121"),
    ("2.3.0", ["--strategies", "hsdp", "--fsdp-reshard", "false"], "--strategies hsdp: needs torch>=2.6"),
])
def test_fsdp_and_hsdp_on_a_torch_older_than_their_rank_code_needs_are_refused_before_any_rank_starts(
        version, argv, expected, sandbox, capsys, monkeypatch):
    # on such a torch every FSDP/HSDP configuration would fail inside its ranks (an ImportError before 2.6)
    import torch
    monkeypatch.setattr(torch, "__version__", version)
    said = _refused([*argv, "--device", "cpu", "--gpus", "1,2", "--workloads", "synthetic"], capsys)
    assert expected in said, said


def test_fsdp_runs_where_the_installed_torch_meets_its_floor():
    from bench.sweep import settings
    cfg = config.SweepConfig(strategies=("single", "dp", "ddp", "zero", "fsdp", "hsdp"), fsdp_reshard=(True, False))
    for version in ("2.6.0", "2.7.1", "2.8.0a0+git1234", "2.14.1+cu130", "3.0.0"):  # the root's rule: False, from 2.6
        settings.check_torch(cfg, version)
    settings.check_torch(dataclasses.replace(cfg, strategies=("single", "dp", "ddp", "zero")), "2.3.1")
