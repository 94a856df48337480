"""Shared fixtures: the repository root, a copy of params.yaml to edit, one torch thread, Fashion-MNIST images,
a working directory with a tiny dataset, a file server on 127.0.0.1, the smoke pipeline built once per run.

Generators of test data (a user's ImageFolder tree, miniature archives of the registered datasets) live in
`tests/datasets_fixtures.py`.
"""

from __future__ import annotations

import functools
import gzip
import os
import pickle
import re
import shutil
import socket
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets_fixtures import LocalServer, make_image_folder, tiny_dataset
from stock_image import ABSENT
from workspace import copy_repo, sh, tool_env

ROOT = Path(__file__).resolve().parent.parent
FMNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


class ModuleWithoutOptionalPackages(pytest.Module):
    """A test module that imports a package a stock PyTorch image lacks (`stock_image.ABSENT`: DVC, the analysis
    stack, ...) is skipped where that package is missing, naming it, so `pytest -m gpu` collects on a GPU node's
    image; any other import error still fails the collection."""

    def collect(self):
        try:
            return super().collect()
        except self.CollectError as exc:
            cause = exc.__cause__
            package = (getattr(cause, "name", None) or "").split(".")[0]
            if isinstance(cause, ModuleNotFoundError) and package in ABSENT:
                pytest.skip(f"{self.path.name} needs {package}, which is not installed here", allow_module_level=True)
            raise


def pytest_pycollect_makemodule(module_path, parent):
    return ModuleWithoutOptionalPackages.from_parent(parent, path=module_path)


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.hasplugin("timeout"):  # pyproject's `timeout` setting, where pytest-timeout is absent
        parser.addini("timeout", "pytest-timeout's limit per test (not installed here: no limit)")
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (`make test-all`); `make test` skips them, saying why")
    parser.addoption("--release", action="store_true",
                     help="also run the release checks (`make release-check`): that the committed reference run was"
                          " recorded by this code and params on the machine kind that recorded it")


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): pytest-timeout's limit (not installed here: no limit)")


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def params_file(tmp_path) -> Path:
    """A writable copy of the repository's params.yaml."""
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    return path


@pytest.fixture
def one_thread():
    """Run the test on one torch thread (results, and timings, do not depend on the machine's cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def fashion_mnist() -> torch.Tensor:
    """16 Fashion-MNIST test images (16, 1, 28, 28), normalised with the dataset's mean/std; skip without them."""
    if not FMNIST.exists():
        pytest.skip(f"{FMNIST} absent (Debian's dataset-fashion-mnist)")
    with gzip.open(FMNIST) as file:
        raw = np.frombuffer(file.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:16]
    return (torch.from_numpy(raw.copy()).float() / 255 - 0.2860) / 0.3530


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory with a tiny Fashion-MNIST-shaped dataset (64 + 32 images of 8 x 8, 3 classes)."""
    tiny_dataset(tmp_path, "fashion_mnist", {"train": 64, "test": 32}, ["a", "b", "c"], seed=0, noise=80, step=60)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def data_server():
    """A `LocalServer` on 127.0.0.1: put bytes into `.files`, download from `.url`/<name>."""
    with LocalServer() as server:
        yield server


@pytest.fixture
def data_dead_url():
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/files"


def build_smoke(dest: Path, env: dict) -> tuple[Path, str]:
    """The smoke profile built as `make repro` builds it (`python -m pipeline repro`: DVC's stages on every core, one
    torch thread each): (project, the runner's output)."""
    repo = copy_repo(dest / "built", "smoke", {"resources.threads": 1}, env=env)
    out = sh(repo, "python", "-m", "pipeline", "repro", env=env)
    shutil.rmtree(repo / "scratch" / "repro")  # the runner's stage logs: the tests look in scratch/ for checkpoints
    if not any((repo / "scratch").iterdir()):
        (repo / "scratch").rmdir()
    return repo, out


def build_laptop_set(dest: Path, env: dict) -> Path:
    """Profile smoke-all (the laptop set's blocks, tiny) built and its README's claims block written; named cpu-all,
    the plan's confirmatory profile, so that its run is the one the README's claims block takes."""
    repo = copy_repo(dest / "repo", "smoke-all", {"resources.threads": 1, "profile": "cpu-all"}, env=env)
    sh(repo, "python", "-m", "pipeline", "repro", env=env)
    sh(repo, "python", "-m", "pipeline", "readme", env=env)
    return repo


def build_users_folder(dest: Path, env: dict) -> tuple[Path, str, str]:
    """The smoke profile on a user's ImageFolder (13 grayscale classes, the filter study on it too), checked and built:
    (project, check's output, the runner's output)."""
    gray = make_image_folder(dest / "gray", classes=13, train_per_class=6, val_per_class=2, colour="gray",
                             eval_dir="test")
    repo = copy_repo(dest / "repo", "smoke", {"datasets": ["folder"], "data.folder_path": str(gray.root),
                                              "data.train_subset": 0, "data.val_subset": 0,
                                              "filter_study.dataset": "folder", "filter_study.model.img_size": 28},
                     env=env)
    checked = sh(repo, "python", "-m", "pipeline", "check", env=env)
    return repo, checked, sh(repo, "python", "-m", "pipeline", "repro", env=env)  # as `make repro` runs it


#: The projects the end-to-end tests build, each once per run: fixture name -> builder. Every one the selected tests
#: use starts in a background thread when the session starts, so that its stages (subprocesses) run beside the unit
#: tests; under pytest-xdist the first worker to claim one builds it and the others wait for its result (a file in
#: the run's shared temporary folder). `pytest_collection_modifyitems` puts the modules using them last.
BUILDS = {"smoke_built": build_smoke, "laptop_set_built": build_laptop_set, "folder_built": build_users_folder}
RESULT = "result.pickle"


#: mark -> (the option that runs its tests, the make target that passes it)
MARKED = {"slow": ("--slow", "make test-all"), "release": ("--release", "make release-check")}


def skip_slow(config, items) -> None:
    """Without --slow, a test marked `slow("why")` is skipped with its reason: `make test` stays within minutes on
    two cores, `make test-all` runs everything. Likewise a `release("why")` test without --release: a check of the
    committed results that only a release makes (`make release-check`). A mark without its reason stops the run."""
    for item in items:
        for name, (option, target) in MARKED.items():
            mark = item.get_closest_marker(name)
            if mark is None:
                continue
            if not mark.args or not str(mark.args[0]).strip():
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} needs its reason, e.g. "
                                        f"@pytest.mark.{name}('trains the smoke profile through DVC twice')")
            if not config.getoption(option, False):
                item.add_marker(pytest.mark.skip(reason=f"{name}: {mark.args[0]} (`{target}` runs it)"))


def pytest_collection_modifyitems(session, config, items):
    """The tests marked slow are skipped without --slow (`skip_slow`). The modules whose tests use a background
    build come last (by then it is built), each in its own order; of those, the ones that go whole to one worker
    (`shares_state`: the SLURM cluster's, which mostly waits on its jobs) first, so that the run does not end on one
    worker alone."""
    skip_slow(config, items)
    for item in items:
        if BUILDS.keys() & set(item.fixturenames):
            timed_without_the_wait(item)
    late = {item.module for item in items if BUILDS.keys() & set(item.fixturenames) and not skipped(item)}
    whole = {m for m in late if shares_state(Path(m.__file__))}
    items[:] = ([i for i in items if i.module not in late] + [i for i in items if i.module in whole]
                + [i for i in items if i.module in late - whole])


def timed_without_the_wait(item) -> None:
    """A test that uses a background build: pytest-timeout's limit (its own, else the suite's) on the test function
    only, because its setup may wait for the build (`result_of`, which has its own limit), however long the build has
    still to go when the test starts (a subset run, or beside other work)."""
    own = item.get_closest_marker("timeout")
    seconds = (own.args[0] if own.args else own.kwargs.get("timeout")) if own else None
    item.add_marker(pytest.mark.timeout(seconds, func_only=True), append=False)


def skipped(item) -> bool:
    """Whether a collected test is skipped before it runs (a plain skip mark: `skip_slow`'s, say), so that nothing is
    built for it."""
    return item.get_closest_marker("skip") is not None


#: a test module defining a module- or class-scoped fixture: its tests share state, in their order
SHARES_STATE = re.compile(r"""@pytest\.fixture\(.*scope=["'](module|class)["']""")


@functools.cache
def shares_state(module: Path) -> bool:
    return bool(SHARES_STATE.search(module.read_text()))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (`make test` runs the suite on every core)
def pytest_xdist_make_scheduler(config, log):
    """Tests go to workers one at a time, in the collection's order (the modules using a background build last),
    except that a module defining a module- or class-scoped fixture goes whole to one worker: another worker would
    build that fixture again (a second SLURM cluster, say) and its tests would find it without what the earlier ones
    did to it. (xdist's own `--dist loadgroup` cannot mark them: its marks no longer reach pytest 9's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if shares_state(config.rootpath / path) else nodeid

    config.option.loadscopereorder = False  # keep the collection's order
    return Scheduling(config, log)


def shared_folder(tmp_path_factory) -> Path:
    """The temporary folder of this run that all its pytest-xdist workers see (without xdist: the run's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def publish(name: str, folder: Path, env: dict) -> None:
    """Build `name` into `folder` and write its result, or the build's traceback, for every worker to read."""
    try:
        outcome = ("ok", BUILDS[name](folder, env))
    except BaseException:  # noqa: BLE001 - every waiting test reports it
        outcome = ("failed", traceback.format_exc())
    partial = folder / f"{RESULT}.part"
    partial.write_bytes(pickle.dumps(outcome))
    partial.rename(folder / RESULT)


@pytest.fixture(scope="session", autouse=True)
def builds(request, tmp_path_factory) -> dict[str, Path]:
    """The background builds the selected tests use, claimed and started before the first test: fixture name -> the
    folder its result appears in. Their environment is taken now, so that a test's monkeypatched variables never
    reach them."""
    wanted = sorted({name for item in request.session.items if not skipped(item) for name in item.fixturenames
                     if name in BUILDS})
    folders = {name: shared_folder(tmp_path_factory) / f"build-{name}" for name in wanted}
    pool = ThreadPoolExecutor(max_workers=max(len(wanted), 1), thread_name_prefix="build")
    for name, folder in folders.items():
        try:
            folder.mkdir()  # atomic: exactly one worker claims each build
        except FileExistsError:
            continue
        pool.submit(publish, name, folder, tool_env())
    yield folders
    pool.shutdown(wait=True, cancel_futures=True)


#: how long a test waits for a background build, counted from its folder's last change (its claim, or the build's
#: first files in it): many times the minutes it takes on 2 cores
BUILD_LIMIT_S = 45 * 60


def result_of(folder: Path):
    """A background build's result, once it is there; its failure fails the test that waited for it."""
    result, deadline = folder / RESULT, folder.stat().st_mtime + BUILD_LIMIT_S
    while not result.exists():
        if time.time() > deadline:
            pytest.fail(f"the background build in {folder} has not finished {BUILD_LIMIT_S // 60} min after it"
                        " started", pytrace=False)
        time.sleep(0.2)
    status, value = pickle.loads(result.read_bytes())
    if status != "ok":
        pytest.fail(f"the background build in {folder} failed:\n{value}", pytrace=False)
    return value


@pytest.fixture(scope="session")
def smoke_built(builds) -> tuple[Path, str]:
    """The smoke profile built once per test run (`build_smoke`): (project, the runner's output).

    The end-to-end modules copy it (`workspace.copy_built`) instead of each building its own.
    """
    return result_of(builds["smoke_built"])


@pytest.fixture(scope="session")
def laptop_set_built(builds) -> Path:
    """Profile smoke-all built once per test run (`build_laptop_set`)."""
    return result_of(builds["laptop_set_built"])


@pytest.fixture(scope="session")
def folder_built(builds) -> tuple[Path, str, str]:
    """A user's folder through the smoke profile, built once per test run (`build_users_folder`)."""
    return result_of(builds["folder_built"])
