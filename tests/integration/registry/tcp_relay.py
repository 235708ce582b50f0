"""A TCP relay on 127.0.0.1 in front of a real server, switched off and on: the server "goes away"
for the clients that reach it through the relay (connections refused), and comes back.  With
``delay`` set, every reply waits that many seconds before it is relayed (a slow server)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class TcpRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener: socket.socket | None = None
        self.port = 0
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        #: seconds each chunk of the server's replies waits before it is relayed
        self.delay = 0.0
        #: connections relayed so far
        self.connections = 0

    def start(self) -> None:
        """Listen (again on the same port after a stop) and relay every connection."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Cut the open connections and refuse new ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        with self._lock:
            open_sockets, self._open = list(self._open), set()
        for sock in open_sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self._listener is not listener:
                client.close()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
                self.connections += 1
            for source, sink, slow in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(source, sink, slow), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, slow: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if slow and self.delay:
                    time.sleep(self.delay)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@contextmanager
def relay_to(host: str, port: int) -> Iterator[TcpRelay]:
    relay = TcpRelay(host, port)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()
