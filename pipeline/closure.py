"""The files of `pipeline/` a module loads: its static import closure, read from the source (every `import`,
inside functions too). One fact for three users: a stage's code deps in dvc.yaml, a training cell's code stamp
(configs/code/<module>.json, which the cell depends on) and the code part of a checkpoint's key. The same walk,
rooted at the working directory, gives a plug-in init's files (`local_closure`), which its cells' configurations
record.

A file's digest in a stamp is of its behaviour, not its text (`source_digest`): the source parsed, its docstrings
dropped and written back by `ast.unparse`, so a comment, a docstring or a reformatting re-runs no cell while any
changed name, value or statement does. `ast.unparse`'s spelling can change between Python minor versions, which
then re-runs the cells once (a new Python may compute other numbers anyway)."""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

from pipeline.method import plugins

ROOT = Path(__file__).resolve().parent.parent


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file `import name` loads from `root` (`plugins.module_file`: Python's path finder order)."""
    return plugins.module_file(name, root)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: a package's module-level tuple of the submodules it imports by name (`importlib`): pipeline.experiments' registry
REGISTRY = "MODULES"


def registered(tree: ast.Module, package: str) -> set[str]:
    """The submodules a package's `REGISTRY` tuple names (its __init__.py's `MODULES = ("a", "b")` gives
    package.a and package.b): imports no import statement shows, so the walk reads them here."""
    return {f"{package}.{element.value}" for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == REGISTRY for t in node.targets)
            and isinstance(node.value, ast.Tuple | ast.List)
            for element in node.value.elts if isinstance(element, ast.Constant) and isinstance(element.value, str)}


def imported_names(path: Path, root: Path = ROOT) -> set[str]:
    """Every module name an import statement of `path` names (absolute; `from a import b` gives a and a.b), and for
    a package's __init__.py the submodules its registry names (`registered`)."""
    names, here, tree = set(), module_name(path, root), ast.parse(path.read_text())
    if path.name == "__init__.py":
        names |= registered(tree, here)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def _with_packages(name: str, root: Path = ROOT) -> set[Path]:
    parts = name.split(".")
    return {f for i in range(1, len(parts) + 1) if (f := module_file(".".join(parts[:i]), root))}


def pipeline_imports(path: Path) -> set[Path]:
    return {f for name in imported_names(path) if name.split(".")[0] == "pipeline" for f in _with_packages(name)}


@cache
def closure(*modules: str) -> frozenset[Path]:
    todo = [f for m in modules for f in _with_packages(m)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += pipeline_imports(path)
    return frozenset(seen)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def source_digest(text: str) -> str:
    """sha256 of Python source without its comments, docstrings and layout (the module docstring says why)."""
    return hashlib.sha256(ast.unparse(_without_docstrings(ast.parse(text))).encode()).hexdigest()


@cache
def _file_digest(path: Path) -> str:
    return source_digest(path.read_text())


def file_digests(module: str) -> dict[str, str]:
    """{path from the repository root: `source_digest` of it} for every file of `module`'s closure, sorted by path."""
    files = {f.relative_to(ROOT).as_posix(): f for f in closure(module)}
    return {name: _file_digest(files[name]) for name in sorted(files)}


def local_closure(module: str, root: Path) -> dict[str, str]:
    """{path from `root`: `source_digest`} of module `module`'s file under `root` and of every module under `root` it
    imports, transitively (its packages' __init__.py too): the code of a plug-in init (params `inits`) that each of
    its cells' configurations records, so that those cells re-run when it changes behaviour and only then. Modules
    found elsewhere (installed libraries) are the run's software, which metrics.json records."""
    root = Path(root).resolve()
    todo, seen = list(_with_packages(module, root)), set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += [f for name in imported_names(path, root) for f in _with_packages(name, root)]
    return {f.relative_to(root).as_posix(): source_digest(f.read_text()) for f in sorted(seen)}
