"""Bad input to `./run_bench.sh export` and to bench.results.load: a clear error naming the value (the command line's
flags from the command line, load's own arguments from Python), exit 2 before the store is read, never a traceback
(exit 3). Also forecast's argparse errors, in the format every other command prints."""
from __future__ import annotations

import errno

import pandas as pd
import pytest

from bench import cli, results
from bench.config import ConfigError
from bench.store.store import StoreError
from report_fixtures import build_sweep_store


@pytest.fixture(scope="module")
def one_sweep(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("export") / "bench.sqlite")
    build_sweep_store(path)
    return path


def _export(store: str, out: str, capsys) -> tuple:
    rc = cli.main(["export", "--store", store, "--out", out])
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    return rc, err


def test_an_out_below_a_file_is_refused_naming_the_file(one_sweep, tmp_path, capsys):
    # exited 3: "internal error: NotADirectoryError" from os.makedirs, with a traceback file
    (tmp_path / "afile").write_text("")
    out = str(tmp_path / "afile" / "sub" / "deeper")
    rc, err = _export(one_sweep, out, capsys)
    assert rc == 2 and f"--out {out!r}: {tmp_path / 'afile'} is a file, not a folder; expected a folder" in err, err


def test_an_out_where_no_folder_can_be_made_is_refused(one_sweep, capsys):
    # exited 3: "internal error: FileNotFoundError"; /proc takes no new folder, even from root
    rc, err = _export(one_sweep, "/proc/bench-export", capsys)
    assert rc == 2 and "--out '/proc/bench-export': cannot create folders under /proc: " in err, err


def test_an_empty_out_is_refused(one_sweep, capsys):
    rc, err = _export(one_sweep, "", capsys)  # exited 3: os.makedirs('')
    assert rc == 2 and "--out '': expected the path of a folder" in err, err


def test_a_write_that_fails_after_the_checks_is_one_clear_line_and_exit_1(one_sweep, tmp_path, capsys, monkeypatch):
    def full(self, path, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", path)
    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    rc, err = _export(one_sweep, str(tmp_path / "out"), capsys)
    assert rc == 1 and f"export: could not write into --out {str(tmp_path / 'out')!r} (" in err, err
    assert "configurations.csv): No space left on device" in err, err


def test_load_of_no_path_says_what_it_expected():
    with pytest.raises(StoreError, match=r"results.load: expected the path of a results store .*, got None"):
        results.load(None)


def test_load_names_its_own_arguments_and_the_command_line_its_flags(one_sweep, tmp_path, capsys):
    with pytest.raises(StoreError, match=r"^results.load: sweep=7: sweep 7 is not in the store; it holds sweep 1$"):
        results.load(one_sweep, sweep=7)
    with pytest.raises(ConfigError, match=r"^results.load: sweep='latest': expected 'last', 'all' or a sweep id"):
        results.load(one_sweep, sweep="latest")
    with pytest.raises(ConfigError, match=r"^results.load: prices='-3': "):
        results.load(one_sweep, prices="-3")
    out = str(tmp_path / "out")
    for flags, said in ((["--sweep", "7"], "error: --sweep '7': sweep 7 is not in the store; it holds sweep 1"),
                        (["--price-per-device-hour", "-3"], "error: --price-per-device-hour '-3': ")):
        assert cli.main(["export", "--store", one_sweep, "--out", out, *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and "results.load" not in err and "prices=" not in err, err


def test_forecast_prints_argparse_errors_as_every_other_command_does(capsys):
    # forecast's plain argparse.ArgumentParser printed "./run_bench.sh forecast: error: ..." where others print "error: ..."
    with pytest.raises(SystemExit) as refused:
        cli.main(["forecast", "--bogus"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.startswith("usage: ./run_bench.sh forecast")
    assert err.splitlines()[-1] == "error: unrecognized arguments: --bogus", err
