"""A real OpenSSH server on 127.0.0.1 for the SSH-remote test (tests/test_remote.py): Debian's `openssh-server`,
started as whoever runs the tests, on a free port, with its own host key and one client key, nothing of the
machine's own ssh configuration read or changed.

`OpenSSH(folder).start()` returns the server or raises `Unavailable` with the reason (no sshd, it did not start);
the test skips with that reason. `env()` is an environment whose HOME holds a known_hosts with the server's key, so
DVC's ssh plugin (asyncssh) trusts the server without a prompt, as it would a lab's host a user has logged in to.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = ("/usr/sbin/sshd", shutil.which("sshd") or "")


class Unavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OpenSSH:
    def __init__(self, folder: Path):
        self.folder = folder
        self.port = _free_port()
        self.user = getpass.getuser()
        self.key = folder / "client_key"
        self.proc: subprocess.Popen | None = None

    def start(self) -> OpenSSH:
        sshd = next((p for p in SSHD if p and os.access(p, os.X_OK)), None)
        keygen = shutil.which("ssh-keygen")
        if not sshd or not keygen:
            raise Unavailable("no OpenSSH server here (Debian: apt-get install openssh-server; .ci/run installs it)")
        self.folder.mkdir(parents=True, exist_ok=True)
        host = self.folder / "host_key"
        for key in (host, self.key):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        authorized = self.folder / "authorized_keys"
        shutil.copy(f"{self.key}.pub", authorized)
        authorized.chmod(0o600)
        config = self.folder / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host}", f"AuthorizedKeysFile {authorized}",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            "StrictModes no", "UsePAM no", f"PidFile {self.folder / 'sshd.pid'}", "Subsystem sftp internal-sftp",
        ]) + "\n")
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation folder, when root
        log = self.folder / "sshd.log"
        self.proc = subprocess.Popen([sshd, "-D", "-f", str(config), "-E", str(log)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = log.read_text()[-500:] if log.exists() else ""
                raise Unavailable(f"sshd exited {self.proc.returncode}: {said}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            self.stop()
            raise Unavailable("sshd did not listen within 10 s")
        home = self.folder / "home"
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        kind, blob = Path(f"{host}.pub").read_text().split()[:2]
        (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {kind} {blob}\n")
        return self

    def url(self, path: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"

    def env(self, base: dict) -> dict:
        return {**base, "HOME": str(self.folder / "home")}

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
