"""Stages started warm: torch, timm, dvclive and the runtime modules imported once per runner.

A CPU cell of the smoke or laptop profiles trains in a second or two, and a light stage (configs, fetch, attention,
figures, ...) works for a second or two more, while starting Python with torch, torchvision (which imports torch's
compiler) and timm takes about three: most of a small grid's time. So the runner's local executor, on a machine without
GPUs, starts one server (`python -m pipeline.scale.warm_server <socket>`) that imports them once and forks a child per
stage, as PyTorch's DataLoader forks its workers; each stage's DVC starts the same way (`python -m pipeline.stage dvc
repro --single-item <stage>`: DVC's imports are about half of its check of an up-to-date stage). The stage command stays
what DVC runs and records (`python -m pipeline.cell ...`, `python -m pipeline.stage ...`); when the environment names
the server (`PIPELINE_WARM`), that process hands its module, arguments, working directory, environment and standard
streams to the server and waits for the child's exit status, forwarding the signals it gets to the child's process
group (Ctrl-C through the runner: DVC ignores SIGINT while its command runs and leaves it to the command, as in a
terminal), and the child's group is killed if that process is. The child runs the stage exactly as a fresh process
would: same interpreter, same code (it checks that every file of this checkout the server imported is unchanged, else
the stage runs in its own process; what the server did not import, the child imports from disk), seeds set by the run.
No server, an unreachable one or a different interpreter: the stage runs in its own process, as under plain `dvc repro`.

This module is the stage's side, which imports nothing of the pipeline; `pipeline.scale.warm_server` the server's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

ENV = "PIPELINE_WARM"
ROOT = Path(__file__).resolve().parents[2]  #: the checkout whose `pipeline` this process imported
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def delegate(module: str, argv: list[str]) -> int | None:
    """Run `python -m <module> <argv>` in a child of the warm server; its exit status, or None to run it here."""
    path = os.environ.get(ENV)
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = json.dumps({"module": module, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                              "root": str(ROOT), "executable": os.path.realpath(sys.executable)}).encode()
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
    for signum in FORWARDED:  # to the child's process group, as a terminal's Ctrl-C reaches a command and its children
        signal.signal(signum, lambda s, frame: os.killpg(pid, s))
    last = replies.readline()
    if not last:
        print("error: the stage's process ended without an exit status (killed?)", file=sys.stderr, flush=True)
        return 1
    return int(json.loads(last)["rc"])
