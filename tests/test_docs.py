"""The README and docs/ held to the code: every relative link resolves (its file, and the heading a link names),
every repository path written in backticks exists, and every `./run_bench.sh` command line shown parses with the
suite's own dispatch (bench.cli.main) and option parsers exactly as the command line would, without running:
argparse is stopped right after the first parse of each command, so nothing is detected, spawned or opened. A
`scripts/*.py` line shown with its arguments parses the same way, through the script's own main()."""
from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import re
import shlex
from pathlib import Path

import pytest

from bench import cli, sweepfile
from conftest import script_module

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~)(\w*)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`([^`]+)`")
REPO_PATH = re.compile(r"(?:bench|tests|scripts|sweeps|slurm|examples)/[\w./-]*")
SHELL = ("", "bash", "sh", "shell", "console")


def split(text: str) -> tuple:
    """(the prose with every fenced block blanked, [(language, block text)])."""
    blocks = [(m.group(2).lower(), m.group(3)) for m in FENCE.finditer(text)]
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text), blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set:
    prose, _ = split(page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, re.M)}


def links(page: Path) -> list:
    prose, _ = split(page.read_text())
    return [m.group(1) for m in LINK.finditer(re.sub(r"`[^`]*`", "", prose))]


def broken_link(page: Path, target: str, root: Path = REPO):
    """Why a link from PAGE does not resolve inside ROOT, or None (links with a scheme are not checked)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return None
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{target}: no file {dest}"
    if root not in dest.parents and dest != root:
        return f"{target}: outside the repository"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading #{anchor} in {dest.name} (headings: {sorted(anchors(dest))})"
    return None


def shown_lines(page: Path) -> list:
    """Every line of a shell code block (continuations joined) and every inline code span of PAGE."""
    prose, blocks = split(page.read_text())
    out = []
    for lang, body in blocks:
        if lang in SHELL:
            out += [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    return out + [" ".join(m.group(1).split()) for m in INLINE_CODE.finditer(prose)]


def command_lines(page: Path) -> list:
    """Every run_bench.sh command shown: a line of a shell code block (continuations joined, comments dropped), or an
    inline code span, whose first word is ./run_bench.sh (or a path ending in run_bench.sh)."""
    cmds = []
    for line in shown_lines(page):
        line = line.strip().removeprefix("$ ")
        if line.split(maxsplit=1)[0].endswith("run_bench.sh"):
            cmds.append(shlex.split(line, comments=True)[1:])
    return cmds


def script_lines(page: Path) -> list:
    """(script path, its arguments) of every `scripts/*.py` line shown with arguments, run directly or by a python
    (`.venv/bin/python scripts/compare_rates.py --store ...`); a script named alone is a mention, not a command."""
    out = []
    for line in shown_lines(page):
        if not re.search(r"scripts/\w+\.py", line):   # prose in backticks need not split as a shell line
            continue
        words = shlex.split(line.strip().removeprefix("$ "), comments=True)
        at = next((i for i, w in enumerate(words) if re.fullmatch(r"(\./)?scripts/\w+\.py", w)), None)
        if at is not None and len(words) > at + 1 and all(Path(w).name.startswith("python") for w in words[:at]):
            out.append((words[at].removeprefix("./"), words[at + 1:]))
    return out


def check_script(script: str, argv: list, monkeypatch) -> None:
    """A shown script line, parsed by the script's own parser (its main() stopped right after its first parse, nothing
    run); AssertionError with argparse's message where the script would refuse it."""
    module = script_module(script, f"shown_{Path(script).stem}")   # its main runs under `if __name__ == "__main__"` alone
    monkeypatch.setattr("sys.argv", [script, *argv])
    takes_argv = bool(inspect.signature(module.main).parameters)
    stop(lambda: module.main(list(argv)) if takes_argv else module.main(), monkeypatch)


class _Parsed(BaseException):  # not an Exception: cli.main's catch-all must not turn it into "internal error"
    def __init__(self, ns):
        self.ns = ns


class _Unknown(BaseException):
    def __init__(self, extra):
        self.extra = extra


def parse_as_cli(argv: list, monkeypatch) -> argparse.Namespace:
    """ARGV through bench.cli.main up to its command's first parse; raises AssertionError with argparse's message when
    the CLI would refuse the line (an unknown flag or command, a value its parser rejects). `--help` counts as parsed."""
    return stop(lambda: cli.main(list(argv)), monkeypatch)


def stop(main, monkeypatch) -> argparse.Namespace:
    """Run main() up to its first argparse parse: the Namespace (an empty one for --help); AssertionError with argparse's
    message where it refuses."""
    real = argparse.ArgumentParser.parse_known_args

    def stop_after_parse(self, args=None, namespace=None):
        ns, extra = real(self, args, namespace)
        raise (_Unknown(extra) if extra else _Parsed(ns))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", stop_after_parse)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main()
    except _Parsed as p:
        return p.ns
    except _Unknown as u:
        raise AssertionError(f"unrecognised arguments: {' '.join(u.extra)}") from None
    except SystemExit as e:
        if e.code in (0, None):  # --help
            return argparse.Namespace()
        raise AssertionError(err.getvalue().strip() or f"exit status {e.code}") from None
    finally:
        monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", real)
    raise AssertionError(f"exit status {status} before any parse: {err.getvalue().strip()}")


def check_command(argv: list, monkeypatch) -> None:
    """One shown command, parsed as the CLI would: ab's --b-args as the sweep flags ab checks them against, and a
    shipped sweep file (--config) read as the sweep would read it."""
    ns = parse_as_cli(argv, monkeypatch)
    if getattr(ns, "b_args", None):
        parse_as_cli(shlex.split(ns.b_args), monkeypatch)
    if getattr(ns, "config", None) and (REPO / ns.config).is_file():
        sweepfile.load(str(REPO / ns.config))


def test_readme_is_a_front_door_under_200_lines():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    prose, blocks = split(text)
    shown = [line.split()[0] for lang, body in blocks if lang in SHELL for line in body.splitlines() if line.strip()]
    assert {"./run_bench.sh", "./run_tests.sh"} == set(shown), shown   # the two commands, and only they
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in prose, f"README links no docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    bad = [why for target in links(page) if (why := broken_link(page, target))]
    assert not bad, f"{page.relative_to(REPO)}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_repository_path_in_backticks_exists(page):
    prose, _ = split(page.read_text())
    paths = {m.group(0).rstrip(".") for code in INLINE_CODE.findall(prose) for m in [REPO_PATH.fullmatch(code.strip())] if m}
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"{page.relative_to(REPO)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_shown_command_parses(page, monkeypatch):
    bad = []
    for argv in command_lines(page):
        try:
            check_command(argv, monkeypatch)
        except Exception as e:  # noqa: BLE001 - every refusal is reported with its line
            bad.append(f"./run_bench.sh {shlex.join(argv)}: {e}")
    assert not bad, f"{page.relative_to(REPO)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_shown_script_line_parses(page, monkeypatch):
    # docs/comparing.md showed `scripts/compare_rates.py --aa 6 --slow 3 --ranks 0,1`, which exits 2: --store is required
    bad = []
    for script, argv in script_lines(page):
        try:
            check_script(script, argv, monkeypatch)
        except Exception as e:  # noqa: BLE001 - every refusal is reported with its line
            bad.append(f"{script} {shlex.join(argv)}: {e}")
    assert not bad, f"{page.relative_to(REPO)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("line, why", [
    ("scripts/compare_rates.py --aa 6 --slow 3 --ranks 0,1", "the following arguments are required: --store"),
    (".venv/bin/python scripts/forecast_rounds.py --rouds 5 -- --workloads synthetic", "unrecognised arguments: --rouds"),
    ("scripts/ab_rates.py --out /tmp/ab --aa four", "argument --aa: invalid int value: 'four'"),
    ("scripts/compare_rates.py --store rates.sqlite --aa 6 --slow 3 --ranks 0,1", None),
    (".venv/bin/python scripts/forecast_rounds.py --rounds 5 -- --workloads synthetic", None),
    ("python3 scripts/ab_rates.py --help", None),
])
def test_a_typo_in_a_shown_script_line_fails(line, why, monkeypatch, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"Run `{line}`, with `scripts/ab_rates.py` named alone (a mention):\n\n```bash\n{line}\n```\n")
    shown = script_lines(page)
    assert len(shown) == 2 and shown[0] == shown[1]
    if why is None:
        check_script(*shown[0], monkeypatch)
    else:
        with pytest.raises(AssertionError, match=re.escape(why)):
            check_script(*shown[0], monkeypatch)


def test_shown_commands_cover_every_command():
    shown = {argv[0] if argv and not argv[0].startswith("-") else "run" for page in PAGES for argv in command_lines(page)}
    assert set(cli.COMMANDS) <= shown, f"commands no page shows: {sorted(set(cli.COMMANDS) - shown)}"


@pytest.mark.parametrize("line, why", [
    ("./run_bench.sh --gpus 1,2 --bucket-cap 25,100 --stategies ddp", "unrecognised arguments: --stategies"),
    ("./run_bench.sh report --memory-budget-gib lots", "--memory-budget-gib"),
    ("./run_bench.sh forcast --to 16", "unknown command 'forcast'"),
    ("./run_bench.sh tune --gpus 8 --budgett 900", "unrecognised arguments: --budgett"),
    ("./run_bench.sh ab --strategies ddp --b-args '--bucket-cap-mbb 100'", "unrecognised arguments: --bucket-cap-mbb"),
    ("./run_bench.sh --config sweeps/quick-cpu.toml --gpus 1", None),
    ("./run_bench.sh selfcheck --device cpu", None),
    ("./run_bench.sh --help", None),
])
def test_a_typo_in_a_shown_command_fails(line, why, monkeypatch, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"Run `{line}` or:\n\n```bash\n{line}   # the same, in a block\n```\n")
    cmds = command_lines(page)
    assert len(cmds) == 2 and cmds[0] == cmds[1]
    if why is None:
        check_command(cmds[0], monkeypatch)
    else:
        with pytest.raises(AssertionError, match=re.escape(why)):
            check_command(cmds[0], monkeypatch)


def test_a_sweep_file_with_an_unknown_key_fails(monkeypatch, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('stategies = ["ddp"]\n')
    with pytest.raises(Exception, match="unknown key 'stategies'"):
        check_command(["--config", str(bad)], monkeypatch)


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## The part\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#the-part) [gone](nothere.md) [no anchor](a.md#not-a-heading) [web](https://x.org/y)\n")
    found = [broken_link(page, t, root=tmp_path) for t in links(page)]
    assert found[0] is None and found[3] is None
    assert "no file" in found[1] and "no heading #not-a-heading" in found[2]


def test_every_page_and_section_the_code_points_users_to_exists():
    # The report pointed at the README's "Forecast" section for months after it moved to docs/forecast.md.
    pointed = set()
    for path in (REPO / "bench").rglob("*.py"):
        text = path.read_text()
        pointed |= {(m.group(1), m.group(2)) for m in re.finditer(r'(docs/[\w-]+\.md)(?:, \\?"([^"\\]+)\\?")?', text)}
        assert not re.search(r"README, section", text), f"{path}: the README no longer holds the reference sections"
    assert pointed
    for page, section in sorted(pointed, key=str):
        assert (REPO / page).exists(), f"{page} is named in the code but does not exist"
        if section:  # a heading, or a bold item of a list
            found = slug(section) in anchors(REPO / page) or f"**{section}**" in (REPO / page).read_text()
            assert found, f"{page} has no section {section!r}"
