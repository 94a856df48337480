"""Training cells started warm: torch, timm, dvclive and the runtime modules imported once per runner.

A CPU cell of the smoke or laptop profiles trains in a second or two, while starting Python with torch, torchvision
(which imports torch's compiler) and timm takes about three: most of a small grid's time. So the runner's local
executor, on a machine without GPUs, starts one server (`python -m pipeline.scale.warm <socket>`) that imports them
once and forks a child per cell, as PyTorch's DataLoader forks its workers. The stage command stays what DVC runs and
records (`python -m pipeline.cell ...`); when the environment names the server (`PIPELINE_WARM`), that process hands
its arguments, working directory, environment and standard streams to the server and waits for the child's exit
status, forwarding the signals it gets (Ctrl-C through the runner), and the child ends itself if that process is
killed. The child runs the cell exactly as a fresh process would: same interpreter, same code (it checks that the
runtime's files are those the server imported, else the cell runs in its own process), seeds set by the run. No
server, an unreachable one or a different interpreter: the cell runs in its own process, as under plain `dvc repro`.
"""

from __future__ import annotations

import contextlib
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

ENV = "PIPELINE_WARM"
ROOT = Path(__file__).resolve().parents[2]  #: the checkout whose `pipeline` this process imported
#: dvclive and the parts of DVC its `Live` loads (dvclive/live.py, dvc.py): half a second of a small cell's time
LOGGER = ("dvclive", "dvc.repo", "dvc.scm", "dvc.repo.experiments.utils", "scmrepo.git")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def delegate(argv: list[str]) -> int | None:
    """Run `python -m pipeline.cell <argv>` in a child of the warm server; its exit status, or None to run it here."""
    path = os.environ.get(ENV)
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "root": str(ROOT),
                              "executable": os.path.realpath(sys.executable)}).encode()
        socket.send_fds(conn, [len(request).to_bytes(8, "big")], [0, 1, 2])
        conn.sendall(request)
        replies = conn.makefile("rb")
        first = json.loads(replies.readline() or "{}")
    except OSError:
        conn.close()
        return None
    if "pid" not in first:  # the server declined (other code or interpreter): run here
        conn.close()
        return None
    pid = first["pid"]
    for signum in FORWARDED:
        signal.signal(signum, lambda s, frame: os.kill(pid, s))
    last = replies.readline()
    if not last:
        print("error: the cell's process ended without an exit status (killed?)", file=sys.stderr, flush=True)
        return 1
    return int(json.loads(last)["rc"])


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size, body = int.from_bytes(header, "big"), b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the cell's process went away before its request arrived")
        body += chunk
    return json.loads(body), fds


def _serve_one(conn: socket.socket, stamps: dict[str, dict]) -> int:
    """In the forked child: take the request, become the cell's process, run it; the exit status."""
    from pipeline.closure import file_digests

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handler is no cell's
    signal.signal(signal.SIGINT, signal.default_int_handler)
    request, fds = _receive(conn)
    runtime = request["argv"][0] if request["argv"] else ""
    same = request["root"] == str(ROOT) and request["executable"] == os.path.realpath(sys.executable)
    if not same or any(stamps.get(m) != file_digests(m) for m in (runtime, "pipeline.cell")):
        _send(conn, {"cold": "another interpreter or other code than the server imported"})
        return 0
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({k: v for k, v in request["env"].items() if k != ENV})  # torchrun's ranks start cold
    sys.argv = ["-m", *request["argv"]]  # run_module puts the module's file first
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    try:
        _send(conn, {"pid": os.getpid()})
    except BrokenPipeError:  # the cell's process died before its cell began (a signal): so does the cell, quietly
        return 1

    def end_with_the_caller() -> None:  # EOF: the cell's process is gone (SIGKILL); a fresh process would be too
        if not conn.recv(1):
            os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=end_with_the_caller, daemon=True).start()
    try:  # as `python -m pipeline.cell <argv>` runs it (its imports are already loaded)
        runpy.run_module("pipeline.cell", run_name="__main__", alter_sys=True)
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
    """Listen on `path` (before importing, so early cells wait rather than start cold), import, fork per cell; end
    when the runner that started it does."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    import pipeline.training.run  # noqa: F401 - torch, torchvision, timm, the engine
    from pipeline.closure import file_digests
    from pipeline.experiments import stages

    for name in LOGGER:  # the engine imports its logger lazily, and dvclive opens the DVC repository at each run
        with contextlib.suppress(ImportError):
            importlib.import_module(name)

    runtimes = sorted({stage.runtime for stage in stages()})
    stamps = {module: file_digests(module) for module in (*runtimes, "pipeline.cell")}
    for module in (*runtimes, "pipeline.cell"):
        __import__(module)
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
                code = _serve_one(conn, stamps)
            except BaseException:  # noqa: BLE001 - the child must never return into the server's loop
                traceback.print_exc()
                code = 1
            os._exit(code)
        conn.close()


class Server:
    """The warm server for one runner: `with Server(folder) as env:` gives the environment its cells need. It imports
    the `pipeline` of `root` (default: the working directory, as `python -m` does)."""

    def __init__(self, folder: str, root: str | None = None):
        self.path, self.root = os.path.join(folder, "warm.sock"), root
        self.proc = None

    def __enter__(self) -> dict:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-m", "pipeline.scale.warm", self.path], cwd=self.root,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10  # it listens before importing: cells started later wait for it
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
