"""A TCP bridge between two network namespaces: it accepts on a listening socket made in one and joins each
connection to a new one that ``connect()`` makes in the other, copying bytes both ways until both sides close.

``up --bastion`` uses one from the host to the bastion's sshd in the fleet network (the only way in) and one back
for each host service a node uses (the runfile mirror, the Kubernetes API): see ``gpulab.netns``.
"""
from __future__ import annotations

import socket
import threading

CHUNK = 65536


def listening(sock: socket.socket, ip: str, port: int) -> socket.socket:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((ip, port))
    sock.listen(64)
    return sock


def connect_tcp(host: str, port: int) -> socket.socket:
    """A blocking connection (the timeout is only the connect's)."""
    conn = socket.create_connection((host, port), timeout=5)
    conn.settimeout(None)
    return conn


class TcpBridge:
    def __init__(self, name: str, listener: socket.socket, connect):
        self.name = name
        self.listener = listener
        self.connect = connect
        self.address = "%s:%d" % listener.getsockname()[:2]
        self.connections = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def start(self) -> "TcpBridge":
        threading.Thread(target=self._accept, name="bridge-" + self.name, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _peer = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        try:
            upstream = self.connect()
        except OSError:
            client.close()
            return
        with self.lock:
            if self.stopped.is_set():
                client.close()
                upstream.close()
                return
            self.connections.update((client, upstream))
        copier = threading.Thread(target=self._copy, args=(upstream, client), daemon=True)
        copier.start()
        self._copy(client, upstream)
        copier.join()
        with self.lock:
            self.connections.difference_update((client, upstream))
        client.close()
        upstream.close()

    @staticmethod
    def _copy(source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def stop(self) -> None:
        self.stopped.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for conn in list(self.connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
