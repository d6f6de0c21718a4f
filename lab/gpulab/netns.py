"""The fleet network of ``up --bastion``: one network namespace, loopback only, holding every GPU node and the
bastion, so that nothing on the host reaches a node's sshd but through the bastion.

A holder process (``unshare --net python -m gpulab.netns hold DIR``) creates the namespace, brings ``lo`` up and
sleeps; nodes and the bastion are started with ``nsenter --net=/proc/<holder>/ns/net`` in front of their
``unshare``. The daemon makes sockets inside the namespace from a short-lived thread that ``setns``-es into it
(a thread's network namespace is its own, and a socket stays in the namespace it was made in): that is how it
probes the nodes' sshd and how the bridges (``gpulab.bridge``) reach into the namespace.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from gpulab.osutil import LAB_DIR, kill_pids

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFREQ = "16sh22x"          # struct ifreq: name, then the flags of its 24-byte union
HOLDER_MODULE = "gpulab.netns"
READY_TIMEOUT_S = 10

_libc = ctypes.CDLL(None, use_errno=True)


def bring_loopback_up() -> None:
    """``ip link set lo up`` of the calling process's network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        flags = struct.unpack(IFREQ, fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def namespace_of(pid: int):
    """``net:[inode]`` of a process, or None when it is gone."""
    try:
        return os.readlink("/proc/%d/ns/net" % pid)
    except OSError:
        return None


def pids_in_network(namespace: str) -> list:
    """Every process whose network namespace is ``namespace`` (``net:[inode]``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and namespace_of(int(entry)) == namespace:
            pids.append(int(entry))
    return pids


def is_holder(pid: int, state_dir: str) -> bool:
    """``pid`` is the namespace holder of the lab in ``state_dir`` (not a reused PID)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as stream:
            argv = stream.read().split(b"\0")
    except OSError:
        return False
    return HOLDER_MODULE.encode() in argv and os.path.abspath(state_dir).encode() in argv


def sweep(state_dir: str, info: dict) -> None:
    """Kill every process left in the lab's fleet network and its holder (``info`` as ``FleetNetwork.info``; also
    when the daemon that made it is gone): with its last process the kernel drops the namespace."""
    namespace, holder_pid = (info or {}).get("namespace"), (info or {}).get("holder_pid")
    if not namespace:
        return
    if holder_pid and namespace_of(holder_pid) == namespace and is_holder(holder_pid, state_dir):
        kill_pids([holder_pid], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = pids_in_network(namespace)
        if not left:
            return
        kill_pids(left, signal.SIGKILL)
        time.sleep(0.05)


class FleetNetwork:
    """The namespace of one lab, seen from the daemon."""

    def __init__(self, process: subprocess.Popen, holder_pid: int):
        self.process = process
        self.holder_pid = holder_pid
        self.path = "/proc/%d/ns/net" % holder_pid
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)   # the namespace, whatever happens to the PID
        self.namespace = os.readlink(self.path)

    @classmethod
    def create(cls, state_dir: str) -> "FleetNetwork":
        env = dict(os.environ, PYTHONPATH=LAB_DIR)
        process = subprocess.Popen(["unshare", "--net", "--", sys.executable, "-m", HOLDER_MODULE, "hold",
                                    os.path.abspath(state_dir)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   env=env, cwd="/", start_new_session=True)
        ready = threading.Event()
        threading.Thread(target=lambda: process.stdout.readline() == b"ready\n" and ready.set(), daemon=True).start()
        if not ready.wait(READY_TIMEOUT_S):
            process.kill()
            process.wait(5)
            raise RuntimeError("the fleet network namespace did not come up within %ds" % READY_TIMEOUT_S)
        return cls(process, process.pid)

    def info(self) -> dict:
        return {"holder_pid": self.holder_pid, "namespace": self.namespace}

    def nsenter_prefix(self) -> list:
        """What runs a command in this namespace (before the node's own ``unshare``)."""
        return ["nsenter", "--net=%s" % self.path, "--"]

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A new socket that lives in this namespace."""
        made = {}

        def make() -> None:
            try:
                if _libc.setns(self.fd, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, "setns into the fleet network: %s" % os.strerror(errno))
                made["socket"] = socket.socket(family, kind)
            except OSError as error:
                made["error"] = error

        thread = threading.Thread(target=make, name="fleet-net-socket")
        thread.start()
        thread.join()
        if "error" in made:
            raise made["error"]
        return made["socket"]

    def connect(self, ip: str, port: int, timeout_s: float = 5) -> socket.socket:
        conn = self.socket()
        try:
            conn.settimeout(timeout_s)
            conn.connect((ip, port))
        except OSError:
            conn.close()
            raise
        conn.settimeout(None)
        return conn

    def port_accepts(self, ip: str, port: int = 22, timeout_s: float = 0.5) -> bool:
        """An SSH banner answers on ip:port inside the namespace (``osutil.port_accepts`` of the host)."""
        try:
            with self.connect(ip, port, timeout_s) as conn:
                conn.settimeout(timeout_s)
                return conn.recv(4).startswith(b"SSH")
        except OSError:
            return False

    def stop(self, state_dir: str) -> None:
        sweep(state_dir, self.info())
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        os.close(self.fd)


def hold() -> int:
    """The holder: ``lo`` up, say ready, then sleep until killed."""
    bring_loopback_up()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        signal.pause()


if __name__ == "__main__":
    if sys.argv[1:2] != ["hold"]:
        sys.exit("usage: unshare --net python -m gpulab.netns hold STATE_DIR")
    sys.exit(hold())
