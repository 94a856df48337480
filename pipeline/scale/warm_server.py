"""The warm server (`python -m pipeline.scale.warm_server <socket>`): imports torch, timm, dvclive and the runtime
modules once, then forks a child per stage that `pipeline.scale.warm.delegate` hands it (see there)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from pipeline.scale.warm import ENV, ROOT

#: dvclive and the parts of DVC its `Live` loads (dvclive/live.py, dvc.py): half a second of a small cell's time;
#: they are most of what a stage's `dvc repro --single-item` imports too
LOGGER = ("dvclive", "dvc.repo", "dvc.scm", "dvc.repo.experiments.utils", "scmrepo.git")
#: the module whose child keeps the server's address: DVC, whose stage command is then served warm too (any other
#: child's own children, torchrun's ranks say, start cold)
DVC = "dvc"


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size, body = int.from_bytes(header, "big"), b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the stage's process went away before its request arrived")
        body += chunk
    return json.loads(body), fds


def sha256(path: str) -> str | None:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if os.path.isfile(path) else None


def loaded_files() -> dict[str, str]:
    """{path: sha256} of the files of this checkout's `pipeline` imported so far."""
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return {f: sha256(f) for f in sorted(filter(None, files)) if Path(f).is_relative_to(ROOT / "pipeline")}


def _serve_one(conn: socket.socket, loaded: dict[str, str]) -> int:
    """In the forked child: take the request, become the stage's process, run it; the exit status."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handler is no stage's
    signal.signal(signal.SIGINT, signal.default_int_handler)
    request, fds = _receive(conn)
    same = request["root"] == str(ROOT) and request["executable"] == os.path.realpath(sys.executable)
    if not same or any(sha256(f) != digest for f, digest in loaded.items()):
        _send(conn, {"cold": "another interpreter or other code than the server imported"})
        return 0
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({k: v for k, v in request["env"].items() if k != ENV or request["module"] == DVC})
    os.setpgid(0, 0)  # a process group of its own, which the stage's process signals as a terminal signals its job
    sys.argv = ["-m", *request["argv"]]  # run_module puts the module's file first
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    try:
        _send(conn, {"pid": os.getpid()})
    except BrokenPipeError:  # the stage's process died before it began (a signal): so does the stage, quietly
        return 1

    def end_with_the_caller() -> None:  # EOF: the stage's process is gone (SIGKILL); a fresh one's group would be too
        if not conn.recv(1):
            os.killpg(0, signal.SIGKILL)

    threading.Thread(target=end_with_the_caller, daemon=True).start()
    try:  # as `python -m <module> <argv>` runs it (what the server imported is already loaded)
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as exc:
        rc = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported as a fresh process would, then its status
        traceback.print_exc()
        rc = 130 if isinstance(sys.exc_info()[1], KeyboardInterrupt) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    _send(conn, {"rc": rc})
    return rc


def serve(path: str) -> None:
    """Listen on `path` (before importing, so early stages wait rather than start cold), import, fork per stage; end
    when the runner that started it does."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    import pipeline.training.run  # noqa: F401 - torch, torchvision, timm, the engine
    from pipeline.experiments import stages

    for name in LOGGER:  # the engine imports its logger lazily, and dvclive opens the DVC repository at each run
        with contextlib.suppress(ImportError):
            importlib.import_module(name)

    runtimes = sorted({stage.runtime for stage in stages()})
    for module in (*runtimes, "pipeline.cell"):
        __import__(module)
    loaded = loaded_files()
    gc.collect()
    gc.freeze()  # the children's collections skip the imported objects (Python's advice for fork without exec)
    listener.settimeout(1.0)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            conn = None
        while True:  # reap the finished children
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if conn is None:
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            conn.settimeout(None)
            try:
                code = _serve_one(conn, loaded)
            except BaseException:  # noqa: BLE001 - the child must never return into the server's loop
                traceback.print_exc()
                code = 1
            os._exit(code)
        conn.close()


class Server:
    """The warm server for one runner: `with Server(folder) as env:` gives the environment its stages need. It imports
    the `pipeline` of `root` (default: the working directory, as `python -m` does)."""

    def __init__(self, folder: str, root: str | None = None):
        self.path, self.root = os.path.join(folder, "warm.sock"), root
        self.proc = None

    def __enter__(self) -> dict:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-m", "pipeline.scale.warm_server", self.path], cwd=self.root,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10  # it listens before importing: stages started later wait for it
        while not os.path.exists(self.path) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return {ENV: self.path}

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        if os.path.exists(self.path):
            os.unlink(self.path)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda s, frame: sys.exit(0))
    serve(sys.argv[1])
