"""Processes of a local Airflow deployment: free ports, log tails, and signalling only the processes
a stack started (a pid is matched with its start time, so a reused pid is never signalled)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from datetime import datetime
from pathlib import Path

__all__ = ["free_port"]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "<no log file>"
    return "\n".join(data.splitlines()[-lines:])


def _proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), used to detect pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])  # field 22 of proc(5)


def _descendants(root: int) -> list[tuple[int, int | None]]:
    """(pid, start time) of every live descendant of ``root`` (Linux /proc scan)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[tuple[int, int | None]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, _proc_start_time(child)))
            todo.append(child)
    return found


def _signal_pid(pid: int, start_time: int | None, sig: int) -> None:
    """Send ``sig`` to ``pid`` unless the pid now belongs to another process."""
    if start_time is not None and _proc_start_time(pid) != start_time:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _alive(pid: int, start_time: int | None) -> bool:
    current = _proc_start_time(pid)
    if current is None or (start_time is not None and current != start_time):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2 :].split()[0] != "Z"


def _airflow_executable() -> list[str]:
    script = Path(sys.executable).with_name("airflow")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "airflow"]


def _parse_ts(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def udp_socket_owner(port: int) -> int | None:
    """Pid of a process holding the UDP socket bound to local ``port`` (Linux /proc), if one does."""
    inodes = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return int(entry.name)
    return None


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents up to init (Linux /proc), nearest first."""
    chain = []
    while pid > 1:
        chain.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
    return chain
