"""Every document the repository's text points a reader to is in the repository.

Over the git-tracked text files (.py .md .yaml .yml .toml .txt .csv, Makefile): no mention of the project's
private notes and design documents by file name (`UNSHIPPED`, unless the path given exists here), no relative
path to a .md / .yaml / .csv file under docs/, paper/ or bench/ that does not exist, and no Markdown link to a
missing file. Cite the papers (by section, table, figure or equation), the official code (code-2505, code-2404,
code-2401 and a file) or a file the repository has instead. Code that opens a file by one of these names (a
Python string that is exactly the name, as the tests reading the workspace's notes do) is not a citation.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".csv"}
#: documents the project's code once cited and the repository does not ship
UNSHIPPED = tuple(f"{stem}.md" for stem in ("paper", "DESIGN", "CONTRACT", "STYLE"))
_NAMES = "|".join(re.escape(n[: -len(".md")]) for n in UNSHIPPED)
#: one of UNSHIPPED, with whatever path is written before it
NAMED = re.compile(rf"(?<![\w.-])((?:[\w.-]+/)*(?:{_NAMES})\.md)(?![\w-])", re.IGNORECASE)
#: a relative path to a document under docs/, paper/ or bench/
DOC_PATH = re.compile(r"(?<![\w./-])((?:\.{1,2}/)*(?:docs|paper|bench)/[\w./-]*?\.(?:md|ya?ml|csv))(?![\w-])")
#: a Markdown link's target
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _exists(target: str, source: str, root: Path) -> bool:
    """Whether `target`, relative to the repository root or to the folder of `source`, is a file or folder in
    the repository."""
    for base in (root, (root / source).parent):
        path = (base / target).resolve()
        if path.is_relative_to(root.resolve()) and path.exists():
            return True
    return False


def _code_names(text: str) -> set[tuple[int, int]]:
    """(line, column) of each Python string literal that is exactly one of UNSHIPPED: code opening that file."""
    found = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and tok.string[1:-1] in UNSHIPPED and tok.string[0] == tok.string[-1]:
                found.add((tok.start[0], tok.start[1] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def offenders(source: str, text: str, root: Path = ROOT) -> list[str]:
    """'file:line: what' for each document `text` (the contents of `source`, a path relative to `root`) names that
    the repository does not have."""
    found = []
    quick = any(n.lower() in text.lower() for n in UNSHIPPED)
    code = _code_names(text) if quick and source.endswith(".py") else set()
    for number, line in enumerate(text.splitlines(), 1):
        if quick:
            for m in NAMED.finditer(line):
                if (number, m.start(1)) not in code and not _exists(m.group(1), source, root):
                    found.append(f"{source}:{number}: {m.group(1)} (not in the repository)")
        for m in DOC_PATH.finditer(line):
            if not _exists(m.group(1), source, root):
                found.append(f"{source}:{number}: {m.group(1)} does not exist")
        if source.endswith(".md"):
            for m in MD_LINK.finditer(line):
                target = m.group(1).split("#", 1)[0]
                if target and not re.match(r"^[a-z][\w+.-]*:", target) and not _exists(target, source, root):
                    found.append(f"{source}:{number}: link to {target}, which does not exist")
    return found


def tracked_text_files() -> list[str]:
    """The git-tracked text files present in the checkout; skip outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (the check runs over `git ls-files`)")
    names = [n for n in out.decode().split("\0") if n]
    return [n for n in names if (Path(n).suffix in TEXT_SUFFIXES or Path(n).name == "Makefile")
            and (ROOT / n).is_file()]


def test_no_tracked_file_names_a_document_the_repository_lacks():
    files = tracked_text_files()
    assert len(files) > 50
    bad = [o for name in files if name != "tests/test_references.py"  # its own examples name missing files
           for o in offenders(name, (ROOT / name).read_text(errors="replace"))]
    assert not bad, ("name a document the repository has, or the paper / official code, instead of:\n"
                     + "\n".join(bad))


#: the examples below write the names through `NAMES`, so that this file names none of them itself
NAMES = dict(zip(("paper", "design", "contract", "style"), UNSHIPPED, strict=True))


@pytest.mark.parametrize("source, text", [
    ("pipeline/x.py", '"""Impulse init ({paper} section 1.1)."""'),
    ("pipeline/x.py", "x = 1  # see {paper} 2.5"),
    ("profiles/x.yaml", "# the recipe of ../shared/{paper} section 3.1"),
    ("pipeline/x.py", "# outputs are atomic ({design})"),
    ("tests/x.py", '"""params `ci_alpha` ({contract})."""'),
    ("docs/x.md", "as {style} asks"),
    ("pipeline/x.py", "# docs/nosuch.{md} explains it"),
    ("docs/x.md", "generated from paper/nosuch.yaml"),
    ("docs/x.md", "see [the notes](nosuch.md#top)"),
])
def test_the_check_finds_a_missing_document(source, text):
    assert len(offenders(source, text.format(md="md", **NAMES))) == 1


@pytest.mark.parametrize("source, text", [
    ("tests/x.py", 'digest = ROOT.parent / "shared" / "{paper}"'),
    ("docs/x.md", "see docs/papers.md, paper/plan.yaml and bench/throughput.yaml"),
    ("docs/x.md", "see [the papers](papers.md#the-papers), [the README](../README.md), [arXiv](https://arxiv.org)"),
    ("paper/x.yaml", "# every paper/*.csv and docs/<name>.md"),
    ("pipeline/x.py", "# [NeurIPS] Sec. 3.2; code-2505 `impulse_init`; the papers' markdown"),
])
def test_the_check_passes_what_exists(source, text):
    assert offenders(source, text.format(**NAMES)) == []
