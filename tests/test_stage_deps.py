"""A stage's deps are the code it imports: nothing less (DVC would serve stale results), nothing more.

Each stage command is `python -m <module> ...` (dvc.yaml runs a stage module directly, not the CLI). The import
closure of that module inside `pipeline/` (`pipeline.closure`: every `import` statement, including those inside
functions) is compared with the stage's deps in dvc.yaml, as DVC itself resolves them. A dependency on a directory
must cover only modules of the closure. The training cells' closures reach no download, CLI, analysis or scale-out
code, and a training checkpoint's key digests exactly that closure.

And the declared dependencies of pyproject.toml cover every third-party import of `pipeline/` (a plain
`pip install .` can run every stage).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from dvc.repo import Repo

from pipeline.__main__ import COMMANDS
from pipeline.closure import closure, imported_names, module_file, module_name, pipeline_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pipeline"


def stages() -> list[tuple[str, str, list[Path]]]:
    """(stage name, command, code deps below pipeline/) of every stage dvc.yaml defines, with every stage group
    switched on (the [CI] grids and the Gaussian filter grid are off in the default params), as DVC resolves them."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ROOT / "dvc.yaml", tmp)
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["ci_alpha"]["datasets"] = params["datasets"][:1]
        params["ci_model3"]["datasets"] = params["datasets"][:1]
        params["filter_study"]["gaussian_sigmas"] = [1.0]
        params["train_configs"] = {"lr_half": {"lr": 0.0005}}
        params["weight_selection"] |= {"teachers": {"small": {"arm": "impulse", "train_size": 500}},
                                       "datasets": ["digits"], "fetch": ["digits"]}
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(params))
        out = []
        with Repo.init(tmp, no_scm=True) as repo:
            for stage in repo.index.stages:
                deps = [ROOT / Path(dep.fs_path).relative_to(tmp) for dep in stage.deps]
                out.append((stage.name, stage.cmd, [d for d in deps if d.is_relative_to(PACKAGE)]))
    return out


def module_of(cmd: str) -> str:
    """The module a stage command runs: `python -m pipeline.training.train ...` -> pipeline.training.train."""
    words = cmd.split()
    assert words[:2] == ["python", "-m"] and words[2].startswith("pipeline."), f"{cmd!r}: not python -m <module>"
    return words[2]


#: one cell per stage group (the cells of a matrix share their deps list)
STAGES = list({name.split("@")[0]: (name, cmd, deps) for name, cmd, deps in reversed(stages())}.values())[::-1]


def test_every_stage_group_is_checked():
    groups = {name.split("@")[0] for name, _, _ in STAGES}
    assert groups == {"sources", "fetch", "filter_study", "filter_gaussian", "train", "ci_alpha", "ci_model3",
                      "ci_table1", "train_config", "attention", "figures", "aggregate", "report", "fetch_ws",
                      "pretrain", "select_finetune", "ws_scratch"}


@pytest.mark.parametrize("name, cmd, deps", STAGES, ids=[s[0] for s in STAGES])
def test_stage_deps_are_the_import_closure_of_its_command(name, cmd, deps):
    needed = closure(module_of(cmd))
    covered = {f for d in deps for f in ([d] if d.is_file() else d.rglob("*.py"))}
    missing = sorted(str(f.relative_to(ROOT)) for f in needed - covered)
    extra = sorted(str(f.relative_to(ROOT)) for f in covered - needed)
    assert not missing, f"{name}: add to its deps in dvc.yaml: {missing}"
    assert not extra, f"{name}: its deps name code it never imports (list files, not the folder): {extra}"


def test_every_command_module_is_reached_only_through_main():
    """__main__ imports a command's module by name only when that command runs; statically it imports none."""
    assert not closure("pipeline.__main__") & {module_file(m) for m, _ in COMMANDS.values()}


def test_every_stage_runs_the_module_its_cli_command_names():
    """`python -m pipeline <command>` and the stage's `python -m <module>` run the same code."""
    assert {module_of(cmd) for _, cmd, _ in STAGES} <= {m for m, _ in COMMANDS.values()}


#: code no training cell may depend on: editing it must not re-train the grid (at paper scale, GPU-days)
NOT_TRAINING = ("pipeline/__main__.py", "pipeline/check.py", "pipeline/profiles.py", "pipeline/data/fetch/",
                "pipeline/analysis/", "pipeline/scale/")


@pytest.mark.parametrize("module", ["pipeline.training.train", "pipeline.training.filter_study",
                                    "pipeline.training.ci_alpha", "pipeline.training.ci_model3",
                                    "pipeline.training.ci_table1", "pipeline.training.train_config"])
def test_training_cells_reach_no_download_cli_analysis_or_scale_out_code(module):
    reached = sorted(f.relative_to(ROOT).as_posix() for f in closure(module))
    assert not [f for f in reached if f.startswith(NOT_TRAINING)]
    assert "pipeline/training/engine.py" in reached and any(f.startswith("pipeline/method/") for f in reached)


def test_the_filter_study_does_not_depend_on_the_init_library():
    assert not any("pipeline/method/inits" in f.as_posix() for f in closure("pipeline.training.filter_study"))


def code_digest_of(package_copy: Path, module: str) -> str:
    out = subprocess.run([sys.executable, "-c", f"from pipeline.training.run import code_digest;"
                          f" print(code_digest({module!r}))"], cwd=package_copy, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_the_checkpoint_key_digests_the_stage_closure_and_nothing_else(tmp_path):
    """Edit code outside a train cell's closure: same key (its checkpoint resumes); inside: a new key."""
    shutil.copytree(PACKAGE, tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest_of(tmp_path, "pipeline.training.train")
    for outside in ("data/fetch/sources.py", "__main__.py", "analysis/report.py", "scale/executors.py"):
        with open(tmp_path / "pipeline" / outside, "a") as f:
            f.write("\n# an edit\n")
    assert code_digest_of(tmp_path, "pipeline.training.train") == before
    with open(tmp_path / "pipeline" / "training" / "engine.py", "a") as f:
        f.write("\n# an edit\n")
    assert code_digest_of(tmp_path, "pipeline.training.train") != before


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


