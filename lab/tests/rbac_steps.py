"""The collection's Kubernetes steps of a driver upgrade, as one operator runs them from the bastion with a
kubeconfig: each step one module run (`ansible localhost -m gpuops.nvidia.<module>`), named so that a failure says
which step needs which right. Steps whose module is not in the collection tree under test are left out (the tree
of main has none of the Kubernetes modules yet; merge the gates and upgrade branches to run them all).
Used by test_rbac_manifest.py."""
from __future__ import annotations

import json
import os
import subprocess
import time

import yaml

from conftest import collections_path

KUBECTL = "/usr/bin/kubectl"
LOCK = "gpuops-nvidia-rollout"      # the one Lease name deploy/rbac/ lets the runner get and update
LOCK_NAMESPACE = "gpuops-system"    # the runner's own namespace, the only one where it may create a Lease
HOLDER = "sre@bastion/rbac-test"
DRIVER = "550.54.15"
NODE = "gpu-node-01"
WORKLOAD = "rbac-workload"


def steps(node: str = NODE) -> list:
    """(step name, module, args, the rules it needs) in runbook order: a ClusterRole's rule by its resource
    (``pods``), a Role's by namespace and resource (``default/pods``)."""
    lock = {"name": LOCK, "namespace": LOCK_NAMESPACE, "holder": HOLDER}
    leases = LOCK_NAMESPACE + "/leases"
    return [
        ("take the rollout lock", "rollout_lock", dict(lock, ttl=600), {leases}),
        ("plan the rollout", "driver_upgrade_plan", {"driver_version": "580.95.05", "cluster_name": "gpulab",
                                                     "nodes": [node]},
         {"nodes", "daemonsets", "pods", "poddisruptionbudgets", "clusterpolicies", "nvidiadrivers"}),
        ("open the batch gate", "rollout_batch_gate", {"nodes": [node], "lock_name": LOCK,
                                                       "lock_namespace": LOCK_NAMESPACE}, {"nodes", leases}),
        ("record the node as draining", "node_upgrade_record", {"name": node, "state": "draining",
                                                                "to_version": "580.95.05"}, {"nodes"}),
        ("wait for the node's batch jobs", "pods_completion_wait", {"node": node, "selector": "app=batch-job",
                                                                    "timeout": 60}, {"pods"}),
        ("cordon the node", "node_drain", {"name": node, "state": "cordon", "reason": "rbac test"}, {"nodes"}),
        ("drain the node", "node_drain", {"name": node, "timeout": 120, "delete_emptydir_data": True},
         {"nodes", "pods", "pods/eviction", "poddisruptionbudgets", "daemonsets"}),
        ("restart the device plugin", "device_plugin_restart", {"nodes": [node], "timeout": 120},
         {"nodes", "pods", "daemonsets", "kube-system/pods"}),
        ("wait for allocatable GPUs", "gpu_allocatable_wait", {"nodes": [node], "count": 8, "timeout": 120},
         {"nodes"}),
        # the lab's nodes publish extended resources, not DRA slices: the wait is allowed to read the slices
        # and times out finding none
        ("wait for the DRA slices", "gpu_allocatable_wait", {"nodes": [node], "resource": "dra", "timeout": 3},
         {"resourceslices"}),
        ("uncordon the node", "node_drain", {"name": node, "state": "uncordon"}, {"nodes"}),
        ("smoke-test the GPUs", "gpu_smoke_test", {"node": node, "timeout": 120},   # all its GPUs
         {"nodes", "pods", "default/pods", "default/pods/log"}),
        ("renew the rollout lock", "rollout_lock", dict(lock, state="renewed", ttl=600), {leases}),
        ("release the rollout lock", "rollout_lock", dict(lock, state="released"), {leases}),
    ]


def available_steps(node: str = NODE) -> list:
    modules = os.path.join(collections_path() or "", "ansible_collections", "gpuops", "nvidia", "plugins", "modules")
    return [step for step in steps(node) if os.path.exists(os.path.join(modules, step[1] + ".py"))]


def run_step(lab, kubeconfig: str, module: str, args: dict, timeout: float = 240):
    """(ok, result) of one module run on localhost with ``kubeconfig``."""
    env = dict(lab.env, ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_COLLECTIONS_PATH=collections_path() or "")
    argv = ["ansible", "localhost", "-m", "gpuops.nvidia." + module, "-a",
            json.dumps(dict(args, kubeconfig=kubeconfig))]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if "=> " not in done.stdout:
        raise AssertionError("no module result (%d): %s%s" % (done.returncode, done.stdout, done.stderr))
    return done.returncode == 0, json.loads(done.stdout[done.stdout.index("=> ") + 3:])


# a step that fails with this message has done what it is there for in this lab
ACCEPTED_FAILURES = {"wait for the DRA slices": "no GPU devices in ResourceSlices of driver gpu.nvidia.com"}


def run_until_failure(lab, kubeconfig: str, node: str = NODE):
    """Runs the steps in order; (None, None) when all pass, else (name of the failed step, its result)."""
    for name, module, args, _ in available_steps(node):
        ok, result = run_step(lab, kubeconfig, module, args)
        if not ok and ACCEPTED_FAILURES.get(name, "\0") not in (result.get("msg") or ""):
            return name, result
    return None, None


def kubectl(lab, *args, stdin=None, check=True, kubeconfig=None):
    done = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig or lab.info["kube"]["kubeconfig"], *args],
                          input=stdin, capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError("kubectl %s: %s%s" % (" ".join(args), done.stdout, done.stderr))
    return done


def get_json(lab, *args):
    return json.loads(kubectl(lab, "get", "-o", "json", *args).stdout)


def eventually(check, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s (last: %r)" % (what, value))
        time.sleep(0.3)


def token_kubeconfig(lab, path: str, token: str) -> str:
    """A copy of the lab's admin kubeconfig that presents ``token`` instead."""
    with open(lab.info["kube"]["kubeconfig"]) as stream:
        config = yaml.safe_load(stream)
    for user in config["users"]:
        user["user"] = {"token": token}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        yaml.safe_dump(config, stream)
    return path


def workload(node: str = NODE) -> list:
    """Two pods pinned to ``node`` under a PodDisruptionBudget that lets both go (their replacements cannot
    start before the uncordon): what the drain has to evict."""
    labels = {"app": WORKLOAD}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": WORKLOAD, "namespace": "default"},
         "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                        "containers": [{"name": "main", "image": "busybox"}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": WORKLOAD,
                                                                               "namespace": "default"},
         "spec": {"maxUnavailable": 2, "selector": {"matchLabels": labels}}},
    ]


def allocatable_gpus(lab, node: str = NODE) -> int:
    return int(get_json(lab, "node", node)["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))


def reset(lab, node: str = NODE) -> None:
    """As the admin: the node schedulable without our annotations, no lock, the workload running on the node,
    and the device plugin's ledger stale again (so that the restart step has a pod to delete)."""
    kubectl(lab, "-n", LOCK_NAMESPACE, "delete", "lease", LOCK, "--ignore-not-found")
    annotations = get_json(lab, "node", node)["metadata"].get("annotations") or {}
    patch = {"spec": {"unschedulable": None},
             "metadata": {"annotations": {key: None for key in annotations if key.startswith("gpuops.nvidia/")}}}
    kubectl(lab, "patch", "node", node, "--type", "merge", "-p", json.dumps(patch))
    kubectl(lab, "-n", "default", "delete", "pod", "-l", "app=gpuops-smoke", "--ignore-not-found", check=False)
    eventually(lambda: len(running_workload(lab)) == 2, what="the workload running on " + node)
    lab.gpulab("clear", node, "stale-device-plugin", check=False)   # left by a run that stopped before the restart
    eventually(lambda: allocatable_gpus(lab, node) == 8, what="8 allocatable GPUs on " + node)
    lab.gpulab("fault", node, "stale-device-plugin")
    eventually(lambda: allocatable_gpus(lab, node) == 0, what="the stale ledger on " + node)


def running_workload(lab) -> list:
    pods = get_json(lab, "pods", "-n", "default", "-l", "app=" + WORKLOAD)["items"]
    return [pod for pod in pods if pod["status"].get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")]


def runner_requests(state_dir: str, user: str, since: float) -> list:
    """The requests ``user`` made since ``since``, as the twin recorded them."""
    found = []
    with open(os.path.join(state_dir, "kube-records.jsonl")) as stream:
        for line in stream:
            if '"record":"request"' in line:
                record = json.loads(line)
                if record["ts"] >= since and record.get("user") == user:
                    found.append(record)
    return found
