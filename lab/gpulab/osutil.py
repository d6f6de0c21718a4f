"""Filesystem and process helpers shared by the daemon (host side) and nsinit (inside a node): JSON and text
files, host mounts, PID namespaces, processes, the ssh port."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the folder holding the gpulab package


def read_json(path: str, default=None):
    try:
        with open(path) as stream:
            return json.load(stream)
    except FileNotFoundError:
        return default


def write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as stream:
        json.dump(data, stream, indent=1, sort_keys=True)
        stream.write("\n")
    os.replace(tmp, path)


def mounts_under(path: str) -> list:
    """Mount points of the host at or below ``path`` (deepest first), from /proc/self/mountinfo."""
    prefix = os.path.realpath(path)
    points = []
    with open("/proc/self/mountinfo") as stream:
        for line in stream:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_all_under(path: str) -> list:
    left = []
    for point in mounts_under(path):
        if subprocess.run(["umount", point], stderr=subprocess.DEVNULL).returncode != 0:
            if subprocess.run(["umount", "-l", point], stderr=subprocess.DEVNULL).returncode != 0:
                left.append(point)
    return left


def pid_namespace(pid: int):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def host_pid() -> int:
    """Our PID as the host sees it, from a new PID namespace (read before /proc is replaced by the namespace's)."""
    with open("/proc/self/status") as stream:
        for line in stream:
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    raise RuntimeError("no NSpid in /proc/self/status")


def is_zombie(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as stream:
            return stream.read().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def pids_in_namespace(namespace: str) -> list:
    """Live processes of a PID namespace (zombies hold no mounts and are left to their reaper)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and pid_namespace(int(entry)) == namespace and not is_zombie(int(entry)):
            pids.append(int(entry))
    return pids


def kill_pids(pids: list, sig=signal.SIGTERM) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_namespace_empty(namespace: str, timeout_s: float = 10) -> None:
    """Wait until no live process is left in a PID namespace (its mounts are gone with them), at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    while pids_in_namespace(namespace) and time.monotonic() < deadline:
        time.sleep(0.02)


def end_boot(process, namespace) -> None:
    """After a boot's PID 1 was told to stop: wait for its ``unshare`` process (the one that reaps PID 1; killing
    it first would leave PID 1 a zombie for the host's init to reap, seconds on some container inits), killing it
    after 10 s, then for the PID namespace to empty (``namespace`` None: nothing to wait for)."""
    if process is not None:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    if namespace:
        wait_namespace_empty(namespace)
        left = pids_in_namespace(namespace)
        if left:
            # On a loaded host a killed namespace can take longer than that to empty (CI saw a process outlive
            # `gpulab down`): kill what is left by PID and wait again.
            kill_pids(left, signal.SIGKILL)
            wait_namespace_empty(namespace, 30)


def process_name(pid: int) -> str:
    try:
        with open("/proc/%d/comm" % pid) as stream:
            return stream.read().strip()
    except OSError:
        return ""


def port_accepts(ip: str, port: int = 22, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            return conn.recv(4).startswith(b"SSH")
    except OSError:
        return False


def in_root(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def write_file(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.islink(path):
        os.unlink(path)
    with open(path, "w") as stream:
        stream.write(text)
    os.chmod(path, mode)
