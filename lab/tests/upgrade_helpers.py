"""Driving the driver upgrade runbook (`gpuops.nvidia.driver_upgrade`) against a twin lab and reading the result
back from the twin's own records; shared by test_runbook_driver_upgrade.py and test_runbook_upgrade_faults.py.

`Fleet(lab, tmp_path)` runs the real playbook with ansible-playbook (`run`), reads the cluster through kubectl
(`nodes`, `record`, `lock_holder`), counts boots from the node twin's event log (`boots`) and device-plugin pod
restarts from the API twin's change records (`plugin_restarts`), and checks the runbook's invariants with
`gpulab.kube.sim.checker` (`check_invariants`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import collections_path
from gpulab.kube.sim.deviceplugin import is_device_plugin_pod

OLD, NEW = "595.91.07", "615.71.09"
RECORD = "gpuops.nvidia/driver-upgrade"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"


class Fleet:
    """A running lab plus the runbook's command line and the cluster's view, through kubectl-free API reads."""

    RUNBOOK = "driver_upgrade"      # the runbook `run` runs (gpuops.nvidia.<RUNBOOK>)

    def __init__(self, lab, tmp_path):
        self.lab = lab
        self.record_dir = str(tmp_path / "runs")
        self.kubeconfig = os.path.join(lab.state_dir, "kubeconfig")

    def extra_vars(self, **overrides) -> dict:
        runfiles = os.path.join(self.lab.state_dir, "runfiles")
        values = {
            "gpuops_driver_version": NEW,
            "gpuops_soak_seconds": 0,
            "gpuops_upgrade_batches": [1, 1],
            "gpuops_run_record_dir": self.record_dir,
            "gpuops_reboot_timeout": 120,
            "gpuops_ready_timeout": 120,
            "gpuops_drain_timeout": 60,
            "gpuops_budget_wait_timeout": 0,
            "nvidia_driver_runfile_src": runfiles + "/NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run",
        }
        values.update(overrides)
        return values

    def ansible_env(self) -> dict:
        return dict(self.lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path())

    def run(self, check=True, timeout=900, background=False, inventory=None, **overrides):
        argv = ["ansible-playbook", "-i", inventory or os.path.join(self.lab.state_dir, "inventory.yml"),
                "gpuops.nvidia." + self.RUNBOOK, "-e", json.dumps(self.extra_vars(**overrides))]
        if background:
            return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=self.ansible_env(), start_new_session=True)
        done = subprocess.run(argv, capture_output=True, text=True, env=self.ansible_env(), timeout=timeout)
        output = done.stdout + done.stderr
        if check and done.returncode != 0:
            raise AssertionError("%s failed (%d):\n%s" % (self.run_label(), done.returncode, output[-6000:]))
        return done.returncode, output

    def run_label(self) -> str:
        return self.RUNBOOK

    def module(self, name: str, args: dict) -> None:
        """Run one of the collection's Kubernetes modules on the controller with the lab's kubeconfig."""
        argv = ["ansible", "localhost", "-m", "gpuops.nvidia." + name, "-a",
                json.dumps(dict({"kubeconfig": self.kubeconfig}, **args))]
        done = subprocess.run(argv, capture_output=True, text=True, env=self.ansible_env(), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    def kubectl_json(self, *args):
        done = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig] + list(args) + ["-o", "json"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def nodes(self) -> dict:
        return {node["metadata"]["name"]: node for node in self.kubectl_json("get", "nodes")["items"]}

    def record(self, node: dict):
        raw = (node["metadata"].get("annotations") or {}).get(RECORD)
        return json.loads(raw) if raw else None

    def lock_holder(self):
        """Who holds the roll-out lock (None: free, or the Lease does not exist)."""
        for lease in self.kubectl_json("get", "leases", "-n", "kube-system")["items"]:
            if lease["metadata"]["name"] == "gpuops-nvidia-rollout":
                return lease["spec"].get("holderIdentity")
        return None

    def boots(self, since=0.0) -> dict:
        counts = {}
        for event in self.lab.events(kind="up", since=since):
            counts[event["node"]] = counts.get(event["node"], 0) + 1
        return counts

    def change_records(self, since=0.0) -> list:
        """The API twin's change records (every object version it committed) since `since` (epoch seconds)."""
        found = []
        with open(os.path.join(self.lab.state_dir, "kube-records.jsonl")) as stream:
            for line in stream:
                if '"record":"change"' not in line:
                    continue
                record = json.loads(line)
                if record["ts"] >= since:
                    found.append(record)
        return found

    def plugin_restarts(self, since=0.0) -> dict:
        """node -> how many of its device-plugin pods started going away (deletion) since `since`."""
        counts, deleting = {}, set()
        for record in self.change_records(since):
            pod = record.get("object") or {}
            if record["resource"] != "pods" or not is_device_plugin_pod(pod):
                continue
            uid = pod["metadata"].get("uid")
            if uid in deleting:
                continue
            if record["event"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                deleting.add(uid)
                node = (pod.get("spec") or {}).get("nodeName")
                counts[node] = counts.get(node, 0) + 1
        return counts

    def check_invariants(self, max_unavailable=1) -> dict:
        done = subprocess.run([sys.executable, "-m", "gpulab.kube.sim.checker", self.lab.state_dir,
                               "--max-unavailable", str(max_unavailable)],
                              capture_output=True, text=True, env=self.lab.env, timeout=120)
        report = json.loads(done.stdout)
        assert report["pdb_violations"] == [], report
        assert report["max_unavailable_ok"], report
        return report
