"""Every command the README, the docs and the docstrings show works as written: each is parsed by the program that
would run it (`python -m pipeline`'s, DVC's, torchrun's parser; a bench script's `--help`; a make target), so a
renamed command, a dropped option or a wrong number of arguments fails here. Templates (`<dataset>`, `...`) are
skipped: they are not commands."""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import subprocess
from functools import cache
from pathlib import Path

import pytest

from pipeline.__main__ import parse_args

ROOT = Path(__file__).resolve().parent.parent
STARTS = ("python -m pipeline", "python3 -m pipeline", "python bench/", "python3 bench/", "dvc ", "torchrun ", "make ")
#: what marks a template rather than a command
TEMPLATE = re.compile(r"<[^>]*>|\.\.\.|\{[^}]*\}|…|\[-|\s-S$")


def docstrings() -> list[tuple[str, str]]:
    """(where, text) of every module, class and function docstring of pipeline/ and bench/."""
    out = []
    for path in [*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "bench").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    out.append((str(path.relative_to(ROOT)), doc))
    return out


def command_lines(text: str) -> list[str]:
    """Commands in a text: lines of code blocks and indented examples, and `inline` ones, joined across `\\`."""
    found = re.findall(r"`([^`\n]+)`", text)
    lines = text.replace("\\\\\n", " ").replace("\\\n", " ").splitlines()
    found += [line.strip().removeprefix("$ ") for line in lines if line.strip().removeprefix("$ ").startswith(STARTS)]
    commands = []
    for line in found:
        for part in line.split(" #")[0].split("&&"):
            part = part.strip()
            if part.startswith(STARTS) and not TEMPLATE.search(part):
                commands.append(part.rstrip(";,.:"))
    return commands


def every_command() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources = [(str(p.relative_to(ROOT)), p.read_text()) for p in pages if p.is_file()] + docstrings()
    return sorted({(cmd, where) for where, text in sources for cmd in command_lines(text)})


COMMANDS = every_command()


def check_pipeline(argv: list[str]) -> None:
    """`python -m pipeline ...` or `python -m pipeline.<module> ...`: its parser accepts it."""
    module = argv[0]
    if module == "pipeline":
        try:
            parse_args(argv[1:])
        except SystemExit as exc:  # --help prints and exits 0
            assert exc.code == 0 and "--help" in argv, argv
    elif module == "pipeline.cell":
        assert len(argv) == 3 and hasattr(importlib.import_module(argv[1]), "build_run"), argv
    elif module == "pipeline.stage":  # a light stage's launcher: what follows is a command module's line
        check_pipeline(argv[1:])
    else:
        mod = importlib.import_module(module)
        assert hasattr(mod, "main") and hasattr(mod, "add_arguments"), f"{module}: not a command module"


@cache
def bench_flags(script: str) -> frozenset[str]:
    """The options a bench script's parser declares: the string arguments of its `add_argument` calls, read from its
    source (running each script's --help imports torch: seconds per script, where this test checks spelling)."""
    assert (ROOT / script).is_file(), script
    tree = ast.parse((ROOT / script).read_text())
    return frozenset(arg.value for node in ast.walk(tree)
                     if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
                     for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str))


def check_bench(argv: list[str]) -> None:
    """`python bench/x.py --flags`: the script exists and its parser declares every flag given."""
    declared = bench_flags(argv[0])
    for flag in (a.split("=")[0] for a in argv[1:] if a.startswith("--")):
        assert flag in declared, f"{argv[0]} has no option {flag}"


def test_commands_were_found():
    kinds = {cmd.split()[0] + (" -m" if " -m " in cmd else "") for cmd, _ in COMMANDS}
    assert {"python -m", "dvc", "make"} <= kinds and len(COMMANDS) > 20


@pytest.mark.parametrize("command, where", COMMANDS, ids=[f"{w}: {c}"[:90] for c, w in COMMANDS])
def test_a_shown_command_is_accepted_by_its_program(command, where):
    argv = shlex.split(command)
    if argv[0] in ("python", "python3") and argv[1] == "-m":
        check_pipeline(argv[2:])
    elif argv[0] in ("python", "python3"):
        check_bench(argv[1:])
    elif argv[0] == "dvc":
        from dvc.cli.parser import get_main_parser

        get_main_parser().parse_args(argv[1:])
    elif argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        args = get_args_parser().parse_args(argv[1:])
        if args.module:
            check_pipeline([args.training_script, *args.training_script_args])
    elif argv[0] == "make":
        targets = re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE)
        assert all(t in targets for t in argv[1:] if "=" not in t), f"{where}: make {argv[1:]}"
        profiles = [a.removeprefix("PROFILE=") for a in argv[1:] if a.startswith("PROFILE=")]
        assert all((ROOT / "profiles" / f"{p}.yaml").is_file() for p in profiles), f"{where}: no profile {profiles}"


def test_make_repro_with_a_profile_merges_it_before_checking_and_running():
    """`make repro PROFILE=<name>` (README's laptop set, docs/profiles.md) works from a fresh clone: make makes the
    environment, then merges the profile, then checks and runs; without PROFILE nothing is merged."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under `make test`

    def plan(*args: str) -> list[str]:
        out = subprocess.run(["make", "-n", "--no-print-directory", "repro", *args], cwd=ROOT, capture_output=True,
                             text=True, env=env).stdout
        return [line.split("python -m pipeline ")[1] for line in out.splitlines() if "python -m pipeline " in line]

    assert plan("PROFILE=cpu-all") == ["profile cpu-all", "check", "repro"]
    assert plan() == ["check", "repro"]
