"""A stage's deps are the code it imports: nothing less (DVC would serve stale results), nothing more.

Each stage command is `python -m pipeline <command> ...`: it runs `pipeline/__main__.py`, which imports the
command's module (COMMANDS) and what that imports. The import closure inside `pipeline/` is computed from the
source (every `import` statement, including those inside functions) and compared with the stage's deps in
dvc.yaml, as DVC itself resolves them. A dependency on a directory must cover only modules of the closure.

And the declared dependencies of pyproject.toml cover every third-party import of `pipeline/` (a plain
`pip install .` can run every stage).
"""

from __future__ import annotations

import ast
import shutil
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from dvc.repo import Repo

from pipeline.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pipeline"


def module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every module name an import statement of `path` names (absolute; `from a import b` gives a and a.b)."""
    names, here = set(), module_name(path)
    for node in ast.walk(ast.parse(path.read_text())):
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


def pipeline_imports(path: Path) -> set[Path]:
    """The files of `pipeline/` that importing `path` loads directly (each named module and its packages)."""
    files = set()
    for name in imported_names(path):
        parts = name.split(".")
        if parts[0] != "pipeline":
            continue
        files |= {f for i in range(1, len(parts) + 1) if (f := module_file(".".join(parts[:i])))}
    return files


def closure(*modules: str) -> set[Path]:
    """The files of `pipeline/` loaded by importing `modules` (with their packages), transitively."""
    todo = [f for m in modules for i in range(1, len(m.split(".")) + 1)
            if (f := module_file(".".join(m.split(".")[:i])))]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += pipeline_imports(path)
    return seen


def stages() -> list[tuple[str, str, list[Path]]]:
    """(stage name, command, code deps below pipeline/) of every stage dvc.yaml defines, with every stage group
    switched on (the [CI] grid and the Gaussian filter grid are off in the default params), as DVC resolves them."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ROOT / "dvc.yaml", tmp)
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["ci_alpha"]["datasets"] = params["datasets"][:1]
        params["filter_study"]["gaussian_sigmas"] = [1.0]
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(params))
        out = []
        with Repo.init(tmp, no_scm=True) as repo:
            for stage in repo.index.stages:
                deps = [ROOT / Path(dep.fs_path).relative_to(tmp) for dep in stage.deps]
                out.append((stage.name, stage.cmd, [d for d in deps if d.is_relative_to(PACKAGE)]))
    return out


def command_of(cmd: str) -> str:
    words = cmd.split()
    assert words[:3] == ["python", "-m", "pipeline"], f"stage command {cmd!r} is not `python -m pipeline ...`"
    return next(w for w in words[3:] if not w.startswith("-"))


#: one cell per stage group (the cells of a matrix share their deps list)
STAGES = list({name.split("@")[0]: (name, cmd, deps) for name, cmd, deps in reversed(stages())}.values())[::-1]


def test_every_stage_group_is_checked():
    groups = {name.split("@")[0] for name, _, _ in STAGES}
    assert groups == {"fetch", "filter_study", "filter_gaussian", "train", "ci_alpha", "attention", "figures",
                      "aggregate", "report"}


@pytest.mark.parametrize("name, cmd, deps", STAGES, ids=[s[0] for s in STAGES])
def test_stage_deps_are_the_import_closure_of_its_command(name, cmd, deps):
    needed = closure("pipeline.__main__", COMMANDS[command_of(cmd)][0])
    covered = {f for d in deps for f in ([d] if d.is_file() else d.rglob("*.py"))}
    missing = sorted(str(f.relative_to(ROOT)) for f in needed - covered)
    extra = sorted(str(f.relative_to(ROOT)) for f in covered - needed)
    assert not missing, f"{name}: add to its deps in dvc.yaml: {missing}"
    assert not extra, f"{name}: its deps name code it never imports (list files, not the folder): {extra}"


def test_every_command_module_is_reached_only_through_main():
    """__main__ imports a command's module by name only when that command runs; statically it imports none."""
    assert not closure("pipeline.__main__") & {module_file(m) for m, _ in COMMANDS.values()}


def third_party_imports() -> set[str]:
    """Top-level names of the non-stdlib, non-pipeline modules that `pipeline/` imports."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for name in imported_names(path):
            top = name.split(".")[0]
            if top and top != "pipeline" and top not in sys.stdlib_module_names:
                names.add(top)
    return names


def requirement_name(spec: str) -> str:
    for sep in "<>=!~[; ":
        spec = spec.split(sep)[0]
    return spec.lower().replace("_", "-")


def test_declared_dependencies_cover_every_import_of_the_package():
    declared = {requirement_name(s) for s in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"]}
    providers = metadata.packages_distributions()
    missing = {}
    for top in third_party_imports():
        dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
        if not dists & declared:
            missing[top] = sorted(dists) or ["(not installed)"]
    assert not missing, f"imported by pipeline/ but not in [project] dependencies of pyproject.toml: {missing}"


def import_graph() -> dict[str, set[str]]:
    files = list(PACKAGE.rglob("*.py"))
    return {module_name(f): {module_name(g) for g in pipeline_imports(f)} - {module_name(f)} for f in files}


def test_the_package_import_graph_has_no_cycle():
    graph, state, cycles = import_graph(), {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            # a module's own parent packages are loaded before it: that edge is not a cycle
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"import cycles: {cycles}"


