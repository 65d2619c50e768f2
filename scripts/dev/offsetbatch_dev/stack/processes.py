"""Local server processes the stack starts: pid files, loopback ports, stop by pid, log tails.

Shared by the Kafka broker(s), the Spark standalone cluster and the Spark Connect server, so every
one of them stops the same way (SIGTERM, then SIGKILL after a deadline, then wait until its ports
are closed) and reports a busy port the same way. Every server runs in a session of its own
(``start_new_session=True``), so its process group id is its pid: what it forked (a Spark worker's
executors, their Python workers) can be found and stopped with it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from offsetbatch.errors import OffsetbatchError

HOST = "127.0.0.1"


class StackProcessError(OffsetbatchError):
    """A local server could not be started, reached or stopped; the message says what to do."""


def port_open(port: int, host: str = HOST) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in ``pid_file`` if that process still runs, else ``None``."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (a server and everything it forked)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def busy_ports(ports: Iterable[int]) -> list[int]:
    return [p for p in ports if port_open(p)]


def require_free(ports: Sequence[int], what: str, fix: str,
                 error: type[Exception] = StackProcessError) -> None:
    """Refuse to start ``what`` on a port something else holds, naming the port and the way out."""
    busy = busy_ports(ports)
    if busy:
        raise error(
            f"port {HOST}:{busy[0]} is already in use by another process, not by {what}. "
            f"Stop that process or choose another port ({fix})."
        )


def launch(cmd: list[str], log_file: Path, pid_file: Path, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.Popen:
    """Start ``cmd`` in a session of its own, stdout and stderr appended to ``log_file``, and record
    its pid. The caller waits for readiness (a real condition, never a sleep)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env, cwd=cwd)
    pid_file.write_text(str(proc.pid))
    return proc


def stop_pid(pid: int, timeout: float = 60.0, hard: bool = False, ports: Sequence[int] = (),
             group: bool = True) -> None:
    """Stop ``pid``: SIGTERM (a clean shutdown) or, with ``hard``, SIGKILL (a crash); SIGKILL after
    ``timeout``. With ``group``, whatever it forked and left behind is killed too. Returns once the
    process is gone and ``ports`` are closed (a JVM's main thread turns zombie before its other
    threads have closed their sockets)."""
    try:
        os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.1)
    if group:
        kill_group(pid, grace=0.0 if hard else 5.0)
    while busy_ports(ports) and time.monotonic() < deadline + 10:
        time.sleep(0.05)


def kill_group(pgid: int, grace: float = 5.0) -> None:
    """Let the rest of a stopped server's process group exit for ``grace`` seconds, then SIGKILL it."""
    deadline = time.monotonic() + grace
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_members(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        end = time.monotonic() + 10
        while group_members(pgid) and time.monotonic() < end:
            time.sleep(0.05)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_for(condition: Callable[[], bool], timeout: float, proc: subprocess.Popen | None, what: str,
             log_file: Path, poll: float = 0.2, error: type[Exception] = StackProcessError) -> None:
    """Poll ``condition`` until it holds; fail early, with the log's tail, if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise error(f"{what} exited with code {proc.returncode}; see {log_file}:\n{tail(log_file)}")
        if condition():
            return
        time.sleep(poll)
    raise error(f"{what} not ready after {timeout:.0f}s; see {log_file}:\n{tail(log_file)}")
