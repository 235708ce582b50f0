"""CPU accounting for benchmarks on a shared machine (Linux ``/proc``): a process tree's CPU seconds,
a triggerer's threads by kind, its memory, threads and Kafka clients, and how many cores other processes
use (to wait for a quiet machine)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from benchmarks.harness import say

_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_table() -> tuple[dict[int, list[str]], dict[int, list[int]]]:
    """Every process's ``/proc/<pid>/stat`` fields after the command name, and its children by pid."""
    stats: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()  # the command name may hold spaces and ')'
        stats[int(entry.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return stats, children


def _tree(root: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _tree_cpu(root: int | None) -> float:
    """CPU seconds (user + system) of ``root`` and its descendants, live or reaped (Linux /proc)."""
    if root is None:
        return 0.0
    stats, children = _proc_table()
    # utime, stime, and cutime, cstime: children that exited (e.g. DAG parsing processes)
    ticks = sum(sum(int(x) for x in stats[pid][11:15]) for pid in _tree(root, children) if pid in stats)
    return ticks / _TICKS


def _tree_pids(root: int) -> list[int]:
    return _tree(root, _proc_table()[1])


def triggerer_threads(root: int | None) -> dict[str, float]:
    """CPU seconds of the triggerer's threads, by kind: the supervisor's main thread (it persists
    the events and answers the runner's requests), the runner's main thread (its event loop: every
    trigger's Python code), librdkafka's threads (``rdk:*``), and the other Python threads (the
    readers' client threads, executors: Python 3.11 gives them no OS-level name of their own)."""
    out: dict[str, float] = {}
    if root is None:
        return out
    for pid in _tree_pids(root):
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task_dir in tasks:
            try:
                raw = (task_dir / "stat").read_text()
                comm = (task_dir / "comm").read_text().strip()
            except OSError:
                continue
            fields = raw[raw.rfind(")") + 2 :].split()
            seconds = (int(fields[11]) + int(fields[12])) / _TICKS
            tid = int(task_dir.name)
            if tid == pid:
                kind = "supervisor main thread" if pid == root else "runner main thread (event loop)"
            elif comm.startswith("rdk:"):
                kind = "librdkafka threads"
            else:
                kind = "other Python threads"
            out[kind] = out.get(kind, 0.0) + seconds
    return out


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy since boot (``/proc/stat``, all CPUs)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICKS


def others_cores(window: float = 2.0) -> float:
    """CPU cores busy with processes that are not this benchmark's (over ``window`` seconds)."""
    busy0, own0, t0 = machine_busy(), _tree_cpu(os.getpid()), time.monotonic()
    time.sleep(window)
    busy1, own1 = machine_busy(), _tree_cpu(os.getpid())
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / (time.monotonic() - t0)


def wait_for_quiet(max_others: float, longest: float) -> float:
    """Wait (at most ``longest`` s) until other processes use at most ``max_others`` CPU cores."""
    deadline = time.monotonic() + longest
    others = others_cores()
    while others > max_others and time.monotonic() < deadline:
        others = others_cores()
    if others > max_others:
        say(f"[machine] other processes still use {others:.2f} cores after {longest:.0f}s: measuring anyway")
    return round(others, 2)


def tree_resources(root: int | None) -> dict[str, float]:
    """Memory and threads of ``root`` and its descendants (a triggerer: supervisor and runner): resident
    memory (MiB, ``psutil``), processes, threads, Kafka clients (librdkafka's ``rdk:main`` thread: one per
    client), all librdkafka threads (``rdk:*``) and the other threads."""
    import psutil

    out = {"rss_mib": 0.0, "processes": 0, "threads": 0, "kafka_clients": 0, "librdkafka_threads": 0}
    if root is None:
        return out
    for pid in _tree_pids(root):
        try:
            out["rss_mib"] += psutil.Process(pid).memory_info().rss / 2**20
            names = []
            for task_dir in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    names.append((task_dir / "comm").read_text().strip())
        except (OSError, psutil.Error):
            continue
        out["processes"] += 1
        out["threads"] += len(names)
        out["kafka_clients"] += sum(1 for name in names if name == "rdk:main")
        out["librdkafka_threads"] += sum(1 for name in names if name.startswith("rdk:"))
    out["rss_mib"] = round(out["rss_mib"], 1)
    out["other_threads"] = out["threads"] - out["librdkafka_threads"]
    return out
