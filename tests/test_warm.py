"""The runner's warm start (`pipeline.scale.warm`), on a copy of the built smoke project: a cell forked from the
server writes what a cell in its own process writes; a cell whose code changed after the server started runs in its
own process; a signal to the cell's process reaches the child, and killing that process ends the child."""

from __future__ import annotations

import importlib
import json
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from workspace import copy_built, metrics, sh, tool_env

from pipeline.scale import warm, warm_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CELL = ["pipeline.training.train", "configs/train/fashion_mnist-vit-impulse-0.json"]
RUN = "results/train/fashion_mnist/vit/impulse/seed0"
#: the first step of `python -m pipeline.cell` (and of `pipeline.stage`), made visible: the child's exit status, or
#: None where it runs itself
PROBE = ("import sys; from pipeline.scale import warm;"
         " print('delegated', warm.delegate(sys.argv[1], sys.argv[2:]), flush=True)")


@pytest.fixture
def built(smoke_built, tmp_path):
    return copy_built(smoke_built[0], tmp_path / "repo")


@pytest.fixture
def server(built, tmp_path):
    """The warm server of the copy, and the environment its cells get."""
    with warm_server.Server(str(tmp_path), root=str(built)) as extra:
        yield {**tool_env(), **extra}


def probe(repo, env, argv=CELL, module="pipeline.cell") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PROBE, module, *argv], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_warm_cell_writes_what_a_cell_of_its_own_writes(built, server):
    shutil.rmtree(built / RUN)
    sh(built, sys.executable, "-m", "pipeline.cell", *CELL)  # its own process: no server named
    cold = metrics(built, RUN)
    shutil.rmtree(built / RUN)
    out = probe(built, server).communicate()[0]
    assert out.strip().endswith("delegated 0") and "final top-1" in out, out
    assert metrics(built, RUN) == cold


def test_a_light_stage_forked_writes_what_it_writes_in_its_own_process(built, server):
    """dvc.yaml's light stages run as `python -m pipeline.stage <module>`: forked from the server under the runner."""
    outputs = ("results/summary.json", "results/tables/claims.json")
    sh(built, sys.executable, "-m", "pipeline.stage", "pipeline.analysis.aggregate")  # no server named: here
    cold = [(built / name).read_bytes() for name in outputs]
    for name in outputs:
        (built / name).unlink()
    out = probe(built, server, [], "pipeline.analysis.aggregate").communicate()[0]
    assert out.strip().endswith("delegated 0"), out
    assert [(built / name).read_bytes() for name in outputs] == cold


def test_a_cell_whose_code_changed_after_the_server_started_runs_in_its_own_process(built, server):
    out = probe(built, server, ["pipeline.training.train", "configs/no-such.json"]).communicate()[0]
    assert out.endswith("delegated 2\n") and "no such configuration" in out  # said by the child, as by a cell
    with open(built / "pipeline" / "training" / "engine.py", "a") as f:
        f.write("\n# an edit\n")
    assert probe(built, server).communicate()[0] == "delegated None\n"


def longer(repo) -> None:
    """The cell trains 200 epochs: seconds to signal it in."""
    path = repo / CELL[1]
    config = json.loads(path.read_text())
    config["train"]["epochs"] = 200
    path.write_text(json.dumps(config))


def child_of(server_env) -> psutil.Process:
    path = server_env[warm.ENV]
    server_proc = next(p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and path in p.info["cmdline"])
    for _ in range(600):
        children = server_proc.children()
        if children:
            return children[0]
        time.sleep(0.05)
    raise AssertionError("the server started no child")


def test_a_signal_reaches_the_child_and_killing_the_cells_process_ends_it(built, server):
    longer(built)
    client = probe(built, server)
    child = child_of(server)
    for line in client.stdout:  # the first epoch's line: training has begun, under the checkpoint policy's handlers
        if "epoch 1/200" in line:
            break
    client.send_signal(signal.SIGTERM)  # what a time limit sends: the run checkpoints and stops, as in its own process
    out = client.communicate(timeout=120)[0]
    assert out.strip().splitlines()[-1] != "delegated 0" and "delegated" in out, out
    assert (built / "scratch").exists() and any((built / "scratch").rglob("*.pt"))
    child.wait(30)

    client = probe(built, server)
    child = child_of(server)
    client.kill()
    child.wait(30)  # gone with the process DVC started


def test_the_modules_the_server_loads_for_the_cells_logger_exist():
    """The server imports dvclive's parts ahead of the cells, ignoring what is not installed: a name that an upgrade
    of DVC moved would silently cost every cell its import again."""
    for name in warm_server.LOGGER:
        importlib.import_module(name)
