"""Host side of the bastion of ``up --bastion``: its host key, its boot inside the fleet network
(``gpulab.bastioninit``), the bridge that makes its sshd the one way in from the host, and its shutdown.

``DIR/bastion/bastion.json`` keeps its address and PID 1, so that ``down`` sweeps it also after a daemon crash.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

from gpulab import sshkeys
from gpulab.bridge import TcpBridge, listening
from gpulab.osutil import LAB_DIR, end_boot, kill_pids, pid_namespace, pids_in_namespace, port_accepts, read_json, \
    wait_namespace_empty, write_json

NAME = "bastion"
USER = "gpuops"
BOOT_TIMEOUT_S = 30
SSH_WAIT_S = 10


def sweep(state_dir: str) -> None:
    """Every process of the lab's bastion (from bastion.json), whoever started it."""
    state = read_json(os.path.join(state_dir, NAME, "bastion.json")) or {}
    namespace = pid_namespace(state["holder_pid"]) if state.get("holder_pid") else None
    if namespace and namespace != pid_namespace(os.getpid()):
        kill_pids(pids_in_namespace(namespace), signal.SIGKILL)
        wait_namespace_empty(namespace)


def running_address(state_dir: str):
    """The bastion's address while it runs (its host ssh clients are the lab's), else None."""
    state = read_json(os.path.join(state_dir, NAME, "bastion.json")) or {}
    if state.get("holder_pid") and pid_namespace(state["holder_pid"]) not in (None, pid_namespace(os.getpid())):
        return state["ip"]
    return None


class Bastion:
    def __init__(self, state_dir: str, ip: str, node_ips: list):
        self.state_dir = state_dir
        self.dir = os.path.join(state_dir, NAME)
        self.keys_dir = os.path.join(state_dir, "keys")
        self.ip = ip
        self.node_ips = list(node_ips)
        self.process = None
        self.holder_pid = None
        self.door = None

    def create(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        sshkeys.generate_key(sshkeys.host_key_path(self.keys_dir, NAME), "root@" + NAME)
        self.save()

    def save(self) -> None:
        write_json(os.path.join(self.dir, "bastion.json"),
                   {"name": NAME, "ip": self.ip, "user": USER, "holder_pid": self.holder_pid})

    def boot(self, network) -> None:
        """Start it in the fleet network; returns once its sshd answers there, raises if it does not."""
        request_path = os.path.join(self.dir, "boot-request.json")
        write_json(request_path, {
            "name": NAME, "ip": self.ip, "user": USER, "node_ips": self.node_ips,
            "host_key": sshkeys.host_key_path(self.keys_dir, NAME),
            "authorized_key": sshkeys.public_key(sshkeys.client_key_path(self.keys_dir))})
        with open(os.path.join(self.dir, "boot.log"), "a") as log_file:
            self.process = subprocess.Popen(
                network.nsenter_prefix() + ["unshare", "--mount", "--uts", "--pid", "--fork", "--propagation",
                                            "private", "--", sys.executable, "-m", "gpulab.bastioninit",
                                            request_path],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file, cwd="/", start_new_session=True,
                env=dict(os.environ, PYTHONPATH=LAB_DIR))
        ready, _, _ = select.select([self.process.stdout], [], [], BOOT_TIMEOUT_S)
        result = json.loads(self.process.stdout.readline() or b"{}") if ready else {}
        self.process.stdout.close()
        if not result.get("ok"):
            self.shutdown()
            raise RuntimeError("the bastion did not start: %s (see %s/boot.log)"
                               % (result.get("error") or "no report within %ds" % BOOT_TIMEOUT_S, self.dir))
        self.holder_pid = result["host_pid"]
        self.save()
        deadline = time.monotonic() + SSH_WAIT_S
        while not network.port_accepts(self.ip):
            if time.monotonic() > deadline:
                raise RuntimeError("the bastion's sshd does not answer on %s:22 (see %s/boot.log)"
                                   % (self.ip, self.dir))
            time.sleep(0.05)

    def open_door(self, network) -> TcpBridge:
        """The one way in: the host's ``ip:22`` bridged to the bastion's sshd in the fleet network."""
        listener = listening(socket.socket(socket.AF_INET, socket.SOCK_STREAM), self.ip, 22)
        self.door = TcpBridge(NAME, listener, lambda: network.connect(self.ip, 22)).start()
        return self.door

    def shutdown(self) -> None:
        if self.door is not None:
            self.door.stop()
            self.door = None
        namespace = pid_namespace(self.holder_pid) if self.holder_pid else None
        if self.holder_pid:
            kill_pids([self.holder_pid], signal.SIGKILL)
        end_boot(self.process, namespace)
        self.process = None
        self.holder_pid = None
        self.save()

    def summary(self) -> dict:
        return {"name": NAME, "ip": self.ip, "user": USER, "pid": self.holder_pid,
                "ssh": bool(self.holder_pid) and port_accepts(self.ip)}   # from the host: through the door
