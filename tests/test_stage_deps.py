"""A stage's deps are the code it imports: nothing less (DVC would serve stale results), nothing more.

Each stage command is `python -m <module> ...`, or for a training cell `python -m pipeline.cell <runtime module>
<config>`. The import closure of that module inside `pipeline/` (`pipeline.closure`: every `import` statement,
including those inside functions) is compared with the stage's deps in dvc.yaml, as DVC itself resolves them, for
every stage of every experiment switched on. A training cell reaches its code through its runtime's stamp,
configs/code/<runtime>.json: its deps must name that stamp, the stamp must list exactly the closure, and the
`configs` stage, which writes the stamp, must depend on every file of it. A dependency on a directory must cover
only modules of the closure. The training cells' closures reach no config parsing, CLI, registry, download,
analysis or scale-out code, and a training checkpoint's key digests exactly that closure.

And the declared dependencies of pyproject.toml cover every third-party import of `pipeline/` (a plain
`pip install .` can run every stage); the committed dvc.lock, the reference run the README quotes, was recorded
with this checkout's code and params.yaml.
"""

from __future__ import annotations

import hashlib
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
from pipeline.closure import closure, imported_names, module_file, module_name, pipeline_imports, source_digest
from pipeline.experiments import stages as declared_stages
from pipeline.experiments import switch_on
from pipeline.params import load_params
from pipeline.resolve import CODE, CONFIGS, code_stamp, resolved
from pipeline.schema import apply_overrides, yaml_load
from pipeline.stages import ANALYSIS, STATIC

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pipeline"
STAMPS = ROOT / CONFIGS / CODE


def stages() -> list[tuple[str, str, list[Path]]]:
    """(stage name, command, code deps below pipeline/) of every stage dvc.yaml defines, with every stage group
    switched on (the [CI] grids and the filter study are off in the default params), as DVC resolves them."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ROOT / "dvc.yaml", tmp)
        params = apply_overrides(yaml.safe_load((ROOT / "params.yaml").read_text()), switch_on())
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(params))
        out = []
        with Repo.init(tmp, no_scm=True) as repo:
            for stage in repo.index.stages:
                deps = [ROOT / Path(dep.fs_path).relative_to(tmp) for dep in stage.deps]
                code = [d for d in deps if d.is_relative_to(PACKAGE) or d.is_relative_to(STAMPS)]
                out.append((stage.name, stage.cmd, code))
    return out


def stamped(dep: Path) -> list[Path]:
    """The code files a dep stands for: a code stamp the files `pipeline.resolve` lists in it, a folder its modules."""
    if dep.is_relative_to(STAMPS):
        stamp = resolved(load_params(ROOT / "params.yaml"))[dep.relative_to(ROOT / CONFIGS).as_posix()]
        return [ROOT / name for name in stamp["files"]]
    return [dep] if dep.is_file() else list(dep.rglob("*.py"))


def module_of(cmd: str) -> str:
    """The module whose code a stage runs: `python -m pipeline.stage pipeline.data.fetch ...` -> pipeline.data.fetch;
    a training cell's `python -m pipeline.cell <runtime module> <config>` -> its runtime module."""
    words = cmd.split()
    assert words[:2] == ["python", "-m"] and words[2] in ("pipeline.stage", "pipeline.cell"), f"{cmd!r}: unknown"
    return words[3]


def missing_and_extra(deps: list[Path], cmd: str, configs_deps: list[Path]) -> tuple[list[str], list[str]]:
    """The code a stage's command imports but its deps miss, and the code its deps name that it never imports; for a
    training cell, what its stamp lists, and only what the configs stage (`configs_deps`) also depends on."""
    module = module_of(cmd)
    launcher = ["pipeline.stage"] if cmd.split()[2] == "pipeline.stage" else []  # it runs before the module
    if module == "pipeline.resolve":  # it writes every runtime's stamp: it depends on all of their code
        needed = closure(module, *launcher, *{stage.runtime for stage in declared_stages()})
    else:
        needed = closure(module, *launcher)
    if any(d.is_relative_to(STAMPS) for d in deps):
        assert deps == [ROOT / CONFIGS / code_stamp(module)], f"{cmd!r}: its code deps are its runtime's stamp alone"
        covered = set(stamped(deps[0])) & set(configs_deps)
    else:
        covered = {f for d in deps for f in stamped(d)}
    return (sorted(str(f.relative_to(ROOT)) for f in needed - covered),
            sorted(str(f.relative_to(ROOT)) for f in covered - needed))


#: one cell per stage group (the cells of a matrix share their deps list)
STAGES = list({name.split("@")[0]: (name, cmd, deps) for name, cmd, deps in reversed(stages())}.values())[::-1]


def test_every_stage_group_is_checked():
    groups = {name.split("@")[0] for name, _, _ in STAGES}
    declared = {stage.name for stage in declared_stages()}
    assert groups == declared | {name for name, _, _ in [*STATIC, *ANALYSIS]}
    assert {"sources", "fetch", "configs", "attention", "floor", "aggregate", "report"} <= groups
    assert {"train", "sia_fit", "select_finetune", "filter_gaussian", "ci_table1"} <= declared


CONFIGS_DEPS = next(deps for name, _, deps in STAGES if name == "configs")


@pytest.mark.parametrize("name, cmd, deps", STAGES, ids=[s[0] for s in STAGES])
def test_stage_deps_are_the_import_closure_of_its_command(name, cmd, deps):
    missing, extra = missing_and_extra(deps, cmd, CONFIGS_DEPS)
    assert not missing, f"{name}: add to its deps in dvc.yaml: {missing}"
    assert not extra, f"{name}: its deps name code it never imports (list files, not the folder): {extra}"


def test_a_missing_dep_is_found():
    """The check can fail: [SIA]'s fit cell whose stamp is written by a configs stage that does not depend on the
    method module the cell runs; the configs stage itself without it; a cell naming its files instead of its stamp."""
    name, cmd, deps = next(s for s in STAGES if s[0].startswith("sia_fit@"))
    sia = PACKAGE / "method" / "sia.py"
    dropped = [d for d in CONFIGS_DEPS if d != sia]
    assert len(dropped) == len(CONFIGS_DEPS) - 1
    assert missing_and_extra(deps, cmd, dropped)[0] == ["pipeline/method/sia.py"]
    configs_cmd = next(c for n, c, _ in STAGES if n == "configs")
    assert missing_and_extra(dropped, configs_cmd, dropped)[0] == ["pipeline/method/sia.py"]
    with pytest.raises(AssertionError, match="its runtime's stamp alone"):
        missing_and_extra([*deps, sia], cmd, CONFIGS_DEPS)


def test_every_command_module_is_reached_only_through_main():
    """__main__ imports a command's module by name only when that command runs; statically it imports none."""
    assert not closure("pipeline.__main__") & {module_file(m) for m, _ in COMMANDS.values()}


def test_every_stage_runs_the_module_its_cli_command_names():
    """`python -m pipeline <command>` and the stage's `python -m <module>` run the same code: a tool's module, or a
    declared stage's runtime module (its command trains the same cell from params)."""
    runtimes = {stage.runtime for stage in declared_stages()}
    assert {module_of(cmd) for _, cmd, _ in STAGES} <= {m for m, _ in COMMANDS.values()} | runtimes


#: code no training cell may depend on: editing it must not re-train the grid (at paper scale, GPU-days)
NOT_TRAINING = ("pipeline/__main__.py", "pipeline/check.py", "pipeline/profiles.py", "pipeline/data/fetch/",
                "pipeline/analysis/", "pipeline/scale/", "pipeline/config.py", "pipeline/entry.py",
                "pipeline/vocabulary.py", "pipeline/datasets.py", "pipeline/closure.py", "pipeline/cell.py",
                "pipeline/training/launch.py", "pipeline/experiments/", "pipeline/resolve.py", "pipeline/stages.py")


@pytest.mark.parametrize("module", sorted({stage.runtime for stage in declared_stages()}))
def test_training_cells_reach_no_config_cli_registry_download_analysis_or_scale_out_code(module):
    reached = sorted(f.relative_to(ROOT).as_posix() for f in closure(module))
    assert not [f for f in reached if f.startswith(NOT_TRAINING)]
    assert "pipeline/training/engine.py" in reached and any(f.startswith("pipeline/method/") for f in reached)


def test_the_configs_stage_validates_without_the_analysis():
    """The first stage (`pipeline.resolve`, validation) imports nothing of pipeline/analysis: planning and power stay
    in `check` on the command line, so an edit of the analysis never re-runs the configs stage."""
    reached = [f.relative_to(ROOT).as_posix() for f in closure("pipeline.resolve")]
    assert "pipeline/validation.py" in reached and "pipeline/check.py" not in reached
    assert not [f for f in reached if f.startswith("pipeline/analysis/")]


def test_the_filter_study_does_not_depend_on_the_init_library():
    assert not any("pipeline/method/inits" in f.as_posix() for f in closure("pipeline.training.filter_study"))


def code_digest_of(package_copy: Path, module: str) -> str:
    out = subprocess.run([sys.executable, "-c", f"from pipeline.cell import code_digest;"
                          f" print(code_digest({module!r}))"], cwd=package_copy, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.slow("imports every training stage in a subprocess per edit")
def test_the_checkpoint_key_digests_the_stage_closure_and_nothing_else(tmp_path):
    """Edit code outside a train cell's closure: same key (its checkpoint resumes); a comment inside: the same; code
    inside: a new key."""
    shutil.copytree(PACKAGE, tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest_of(tmp_path, "pipeline.training.train")
    for outside in ("data/fetch/sources.py", "__main__.py", "analysis/report.py", "scale/executors.py", "config.py",
                    "vocabulary.py", "datasets.py", "entry.py", "closure.py", "training/launch.py", "cell.py"):
        with open(tmp_path / "pipeline" / outside, "a") as f:
            f.write("\n# an edit\n")
    assert code_digest_of(tmp_path, "pipeline.training.train") == before
    with open(tmp_path / "pipeline" / "training" / "engine.py", "a") as f:
        f.write("\n# an edit\n")
    assert code_digest_of(tmp_path, "pipeline.training.train") == before  # a comment computes nothing new
    with open(tmp_path / "pipeline" / "training" / "engine.py", "a") as f:
        f.write("\nAN_EDIT = 1\n")
    assert code_digest_of(tmp_path, "pipeline.training.train") != before


def third_party_imports(folder: Path = PACKAGE) -> set[str]:
    """Top-level names of the non-stdlib, non-pipeline modules that the modules under `folder` import."""
    names = set()
    for path in folder.rglob("*.py"):
        for name in imported_names(path):
            top = name.split(".")[0]
            if top and top != "pipeline" and top not in sys.stdlib_module_names:
                names.add(top)
    return names


def requirement_name(spec: str) -> str:
    for sep in "<>=!~[; ":
        spec = spec.split(sep)[0]
    return spec.lower().replace("_", "-")


def declared_requirements(*extras: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [s for e in extras for s in project["optional-dependencies"][e]]
    return {requirement_name(s) for s in specs}


def test_the_method_library_needs_only_the_core_dependencies():
    """`pip install .` (no extra) runs `pipeline.method`: it imports only what [project] dependencies declare, and no
    module of the pipeline around it."""
    assert third_party_imports(PACKAGE / "method") <= {"torch", "torchvision", "timm", "numpy", "scipy",
                                                       "threadpoolctl"}
    assert declared_requirements() == {"torch", "torchvision", "timm", "numpy", "scipy", "threadpoolctl"}
    outside = {f for f in closure("pipeline.method.inits", "pipeline.method.ci_2401", "pipeline.method.sia",
                                  "pipeline.method.convmixer", "pipeline.method.weight_selection")
               if not f.is_relative_to(PACKAGE / "method")}
    assert outside <= {PACKAGE / "__init__.py", PACKAGE / "errors.py"}


def test_declared_dependencies_cover_every_import_of_the_package():
    declared = declared_requirements("pipeline")
    providers = metadata.packages_distributions()
    missing = {}
    for top in third_party_imports():
        dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
        if not dists & declared:
            missing[top] = sorted(dists) or ["(not installed)"]
    assert not missing, f"imported by pipeline/, not in pyproject.toml's dependencies or `pipeline` extra: {missing}"


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


def recorded_versions(paths: set[str]) -> dict[str, dict[str, bytes]]:
    """{path: {md5: bytes}} of every version of `paths` in the repository's history (one `git log`, one `git cat-file
    --batch`); {} where git or the history is not at hand (a shallow clone: the md5s must then match)."""
    try:
        log = subprocess.run(["git", "log", "--all", "--format=", "--raw", "--no-abbrev", "--", *sorted(paths)],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    blobs = set()
    for line in log.splitlines():
        if line.startswith(":") and "\t" in line:
            meta, path = line.split("\t", 1)
            if path in paths and set(meta.split()[3]) != {"0"}:  # the version the commit left (not a deletion)
                blobs.add((meta.split()[3], path))
    blobs = sorted(blobs)
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=ROOT, input="".join(f"{b}\n" for b, _ in blobs).encode(),
                         capture_output=True, check=True).stdout
    versions: dict[str, dict[str, bytes]] = {}
    for _, path in blobs:
        header, out = out.split(b"\n", 1)
        if len(header.split()) != 3:  # "<id> missing": a partial clone
            continue
        size = int(header.split()[2])
        body, out = out[:size], out[size + 1:]
        versions.setdefault(path, {})[hashlib.md5(body).hexdigest()] = body
    return versions


@pytest.mark.release("only the machine kind that recorded dvc.lock can re-record it bit for bit; a docstring or a new"
                     " experiment must not fail `make test`")
def test_the_committed_reference_run_was_made_by_this_code_and_params():
    """dvc.lock's hash of every tracked file a stage depends on (code, paper/, bench/) is the file's, and the params
    the configs stage recorded are params.yaml's: a change to either without re-recording the run leaves the README's
    numbers and `dvc metrics diff` comparing with a run this checkout would not reproduce. A Python file whose
    recorded version differs from it only in comments, docstrings or layout (the code stamps' `source_digest`)
    computes what it computed: the run stands."""
    lock = yaml_load((ROOT / "dvc.lock").read_text())["stages"]
    changed = {(name, dep["path"], dep["md5"]) for name, stage in lock.items() for dep in stage.get("deps", [])
               if dep["path"].split("/")[0] in ("pipeline", "paper", "bench") and (ROOT / dep["path"]).is_file()
               and hashlib.md5((ROOT / dep["path"]).read_bytes()).hexdigest() != dep["md5"]}
    history = recorded_versions({path for _, path, _ in changed if path.endswith(".py")})

    def same_code(path: str, md5: str) -> bool:
        old = history.get(path, {}).get(md5)
        return old is not None and source_digest(old.decode()) == source_digest((ROOT / path).read_text())

    stale = sorted({(name, path) for name, path, md5 in changed if not same_code(path, md5)})
    fix = "re-record it: `python -m pipeline repro` where the reference run's results are, then commit dvc.lock"
    assert not stale, f"dvc.lock is older than the code of {len(stale)} stage dep(s), e.g. {stale[:3]}; {fix}"
    recorded = lock["configs"]["params"]["params.yaml"]
    assert recorded == yaml_load((ROOT / "params.yaml").read_text()), f"params.yaml changed since; {fix}"
