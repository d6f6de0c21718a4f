"""Applying and clearing the faults of a chaos round on a running twin (benchmarks/chaos.py).

Node faults go through `gpulab fault` / `gpulab clear`, as an operator would break a node; the surroundings are
broken by the harness itself: Prometheus and Alertmanager stop answering (SIGSTOP, then SIGCONT), another holder
takes the roll-out lock (its Lease written as another `rollout_lock` would), a PDB blocks a drain and is then
released, sshd is killed, the API twin answers errors or holds a request (rules in `DIR/api-faults.json`, read by
lab/gpulab/kube/api/faults.py). The controller kill is the round's own business (it owns the ansible-playbook process).
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time

from chaos_schedule import API_FAULTS, CONNECTION_FAULTS, NODE_FAULTS, RESTART_FAULTS

LOCK_NAME, LOCK_NAMESPACE = "gpuops-nvidia-rollout", "kube-system"
OTHER_HOLDER = "mallory@bastion-9/chaos"


def utc_micro(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


SSHD_NAMES = ("sshd", "sshd-session")   # OpenSSH 9.8 serves each connection from sshd-session


def cut_ssh_connections(state_dir: str, node: str) -> list:
    """SIGKILL the node twin's sshd processes that serve a connection (an sshd whose parent is an sshd), the
    listener left alone: the controller's established connection (its ControlMaster too) is cut while a task runs,
    the next connection is served. The PIDs killed, as the host sees them."""
    with open(os.path.join(state_dir, "nodes", node, "node.json")) as stream:
        holder = json.load(stream).get("holder_pid")
    if not holder:
        return []
    namespace = os.readlink("/proc/%d/ns/pid" % holder)

    def comm_ppid(pid: str):
        with open("/proc/%s/stat" % pid) as stream:
            stat = stream.read()
        return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()[1]

    serving = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink("/proc/%s/ns/pid" % pid) != namespace:
                continue
            comm, ppid = comm_ppid(pid)
            if comm in SSHD_NAMES and comm_ppid(ppid)[0] in SSHD_NAMES:
                serving.append(int(pid))
        except (OSError, ValueError, IndexError):
            continue    # gone meanwhile
    for pid in serving:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return serving


class Injector:
    """Faults on one twin: `apply(fault)` -> details, `release(fault)`, `clear_all()` at the round's end."""

    def __init__(self, lab, collections: str, alertmanager=None):
        self.lab = lab
        self.collections = collections
        self.alertmanager = alertmanager
        self.kubeconfig = os.path.join(lab.state_dir, "kubeconfig")
        self.stopped_pids = set()
        self.lock_taken = False
        self.api_rules = []
        self.api_faults_path = os.path.join(lab.state_dir, "api-faults.json")

    # ---- node faults ----------------------------------------------------------------------------------------
    def apply(self, fault: dict) -> dict:
        kind = fault["kind"]
        if kind in NODE_FAULTS:
            at_next_boot = ["--at-next-boot"] if kind == "stale-device-plugin" else []
            done = self.lab.gpulab("fault", fault["node"], kind, *at_next_boot, check=False)
            return {"rc": done.returncode, "output": (done.stdout + done.stderr).strip()[-300:]}
        if kind == "pdb-block-release":
            done = self.lab.gpulab("fault", fault["node"], "pdb-block", check=False)
            return {"rc": done.returncode}
        if kind == "ssh-drop":
            done = self.lab.gpulab("fault", fault["node"], "ssh-drop", check=False)
            return {"rc": done.returncode}
        if kind == "ssh-cut":
            return {"sshd_killed": cut_ssh_connections(self.lab.state_dir, fault["node"])}
        if kind == "prometheus-down":
            return self._stop(self.lab.info.get("metrics", {}).get("prometheus_pid"))
        if kind == "alertmanager-down":
            return self._stop(self.alertmanager.process.pid if self.alertmanager else None)
        if kind == "lock-taken":
            return self._take_lock()
        rules = dict(API_FAULTS, **CONNECTION_FAULTS, **RESTART_FAULTS)
        if kind in rules:
            # an id of its own: the twin goes on with the earlier rules' counts instead of starting them again
            rule = dict(rules[kind], id="%s#%d" % (kind, len(self.api_rules) + 1))
            return self._write_api_rules(self.api_rules + [rule])
        raise ValueError("no injector for fault %r" % kind)

    def release(self, fault: dict) -> None:
        kind = fault["kind"]
        if kind == "pdb-block-release":
            self.lab.gpulab("clear", fault["node"], "pdb-block", check=False)
        elif kind in NODE_FAULTS or kind == "ssh-drop":
            self.lab.gpulab("clear", fault["node"], "ssh-drop" if kind == "ssh-drop" else kind, check=False)
        elif kind == "prometheus-down":
            self._resume(self.lab.info.get("metrics", {}).get("prometheus_pid"))
        elif kind == "alertmanager-down":
            self._resume(self.alertmanager.process.pid if self.alertmanager else None)
        elif kind == "lock-taken":
            self._release_lock()

    def clear_all(self) -> None:
        """Every fault gone: nodes cleared (a hung node boots), services answering, the other holder's lock
        released."""
        for name in self.lab.node_names:
            self.lab.gpulab("clear", name, check=False)
        for pid in list(self.stopped_pids):
            self._resume(pid)
        if self.lock_taken:
            self._release_lock()
        if self.api_rules:
            self._write_api_rules([])

    # ---- services that stop answering -------------------------------------------------------------------------
    def _stop(self, pid) -> dict:
        if not pid:
            return {"skipped": "not running"}
        os.kill(pid, signal.SIGSTOP)
        self.stopped_pids.add(pid)
        return {"pid": pid}

    def _resume(self, pid) -> None:
        if pid in self.stopped_pids:
            os.kill(pid, signal.SIGCONT)
            self.stopped_pids.discard(pid)

    # ---- the API twin's answers -------------------------------------------------------------------------------
    def _write_api_rules(self, rules: list) -> dict:
        """Replace the rule file at once (the twin starts the count of a rule without an id it held again)."""
        self.api_rules = rules
        partial = self.api_faults_path + ".new"
        with open(partial, "w") as stream:
            json.dump(rules, stream)
        os.replace(partial, self.api_faults_path)
        return {"rules": rules}

    # ---- another holder's lock ----------------------------------------------------------------------------------
    def _take_lock(self) -> dict:
        """Another operator's run holds the Lease: taken if free, overwritten (a peer that ignored ours) if held."""
        self.lock_taken = True
        done = self._lock_module({"state": "acquired", "holder": OTHER_HOLDER, "ttl": 600})
        if done.returncode == 0:
            return {"how": "acquired"}
        now = time.time()
        # the peer takes the Lease as its own: our run's token hash goes too (else nobody could release it, chaos
        # seed 212: the harness's own release was refused for want of our token and left the lock held)
        patch = {"metadata": {"annotations": {"gpuops.nvidia/holder-token-sha256": None}},
                 "spec": {"holderIdentity": OTHER_HOLDER, "acquireTime": utc_micro(now), "renewTime": utc_micro(now),
                          "leaseDurationSeconds": 600}}
        stole = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "-n", LOCK_NAMESPACE, "patch", "lease",
                                LOCK_NAME, "--type", "merge", "-p", json.dumps(patch)],
                               capture_output=True, text=True, timeout=60)
        return {"how": "overwritten", "rc": stole.returncode}

    def _release_lock(self) -> None:
        done = self._lock_module({"state": "released", "holder": OTHER_HOLDER})
        if done.returncode != 0:
            print("chaos: the other holder's lock was not released: %s" % (done.stdout + done.stderr)[-500:],
                  file=sys.stderr)
        self.lock_taken = False

    def _lock_module(self, args: dict) -> subprocess.CompletedProcess:
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-m",
                "gpuops.nvidia.rollout_lock", "-a",
                json.dumps(dict({"kubeconfig": self.kubeconfig, "name": LOCK_NAME}, **args))]
        env = dict(self.lab.env, ANSIBLE_COLLECTIONS_PATH=self.collections, ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
