"""A StatsD server for tests: a UDP socket on 127.0.0.1 whose every line is kept, read by a thread.

The process that sent a line matching ``attribute`` (our metric names by default) is looked up the
moment the line arrives (the owner of the sending UDP port, and its parents: Linux /proc), so a test
can tell which process of a deployment reported it (:meth:`StatsdServer.senders`) even after a
short-lived task process exited.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from harness.processes import ancestors, udp_socket_owner

__all__ = ["StatsdLine", "StatsdServer"]


@dataclass(frozen=True)
class StatsdLine:
    text: str
    port: int  # the sender's UDP port
    pids: tuple[int, ...]  # for lines matching ``attribute``: the sender's pid and its parents' pids


class StatsdServer:
    """``env()`` points Airflow's ``[metrics]`` at this server; :meth:`wait_for` matches lines."""

    def __init__(self, attribute: str = r"airflow\.kafka_events\..*") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self._attribute = re.compile(attribute)
        self._owners: dict[int, tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self._received: list[StatsdLine] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"statsd-{self.port}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                data, (_, port) = self.sock.recvfrom(65536)
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return
            received = [self._line(text, port) for text in data.decode(errors="replace").splitlines()]
            with self._lock:
                self._received.extend(received)

    def _line(self, text: str, port: int) -> StatsdLine:
        if not self._attribute.fullmatch(text):
            return StatsdLine(text, port, ())
        if not self._owners.get(port):
            owner = udp_socket_owner(port)
            self._owners[port] = tuple(ancestors(owner)) if owner is not None else ()
        return StatsdLine(text, port, self._owners[port])

    @property
    def lines(self) -> list[str]:
        with self._lock:
            return [line.text for line in self._received]

    def matching(self, pattern: str) -> list[StatsdLine]:
        regex = re.compile(pattern)
        with self._lock:
            return [line for line in self._received if regex.fullmatch(line.text)]

    def wait_for(self, pattern: str, timeout: float = 60.0, count: int = 1) -> list[str]:
        """The lines fully matching ``pattern`` once there are ``count``; AssertionError at ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line.text for line in self.matching(pattern)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                ours = [line for line in self.lines if "kafka_events" in line]
                raise AssertionError(
                    f"no {count} StatsD line(s) matching {pattern!r} within {timeout:.0f}s; "
                    f"kafka_events lines received: {ours[-50:]}"
                )
            time.sleep(0.2)

    def wait_for_total(
        self, pattern: str, total: int, timeout: float = 60.0, *, at_least: bool = False
    ) -> list[str]:
        """The counter lines fully matching ``pattern`` (``name:<n>|c``) once their ``n`` add up to
        ``total`` (``at_least``: to ``total`` or more: other runs report to the same counter);
        AssertionError at ``timeout`` or, unless ``at_least``, when they add up to more."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line.text for line in self.matching(pattern)]
            summed = sum(int(text.rsplit(":", 1)[1].split("|", 1)[0]) for text in found)
            if summed > total and not at_least:
                raise AssertionError(
                    f"StatsD lines matching {pattern!r} add up to {summed} > {total}: {found!r}"
                )
            if summed >= total:
                return found
            if time.monotonic() > deadline:
                ours = [line for line in self.lines if "kafka_events" in line]
                raise AssertionError(
                    f"StatsD lines matching {pattern!r} add up to {summed}, not {total}, within "
                    f"{timeout:.0f}s; kafka_events lines received: {ours[-50:]}"
                )
            time.sleep(0.2)

    def senders(self, pattern: str) -> set[tuple[int, ...]]:
        """Of each process that sent lines matching ``pattern``: its pid and its parents' pids
        (empty: the sender had exited before its line was read)."""
        return {line.pids for line in self.matching(pattern)}

    def reporters(self, pattern: str, component_of: Callable[[Iterable[int]], str | None]) -> set[str | None]:
        """The components (``AirflowStack.component_of``) whose processes sent lines matching
        ``pattern``; None for a sender of none of them or one that is gone (a restarted component)."""
        return {component_of(pids) for pids in self.senders(pattern)}

    def env(self) -> dict[str, str]:
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self.sock.close()
