"""kubectl, workload builders and a playbook runner for the gate tests (test_gates_drain.py,
test_gates_device_plugin.py, test_lab_gpu_operator.py); module runs and the API's request records are in
gpulab.testkit."""
from __future__ import annotations

import json
import os
import subprocess
import time

import yaml

KUBECTL = "/usr/bin/kubectl"


def run_in_playbook(lab, module, args, check_mode=False, tmp_dir=None):
    """Run ``gpuops.nvidia.<module>`` with ``args`` as the one task of a playbook whose connection is set once through
    ``module_defaults: {group/gpuops.nvidia.k8s: {kubeconfig}}``; returns the registered result (with ``failed`` and
    ``msg`` when it failed)."""
    tmp_dir = tmp_dir or lab.state_dir
    stamp = "%d-%d" % (os.getpid(), time.monotonic_ns())
    result_path = os.path.join(tmp_dir, "result-%s.json" % stamp)
    playbook = [{
        "name": "Run gpuops.nvidia.%s" % module, "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/gpuops.nvidia.k8s": {"kubeconfig": os.path.join(lab.state_dir, "kubeconfig")}},
        "tasks": [
            {"name": "The module", "gpuops.nvidia.%s" % module: args, "register": "out", "ignore_errors": True,
             "check_mode": check_mode},
            {"name": "Keep its result", "ansible.builtin.copy": {"content": "{{ out | to_json }}",
                                                                 "dest": result_path, "mode": "0600"},
             "check_mode": False},
        ]}]
    path = os.path.join(tmp_dir, "playbook-%s.yml" % stamp)
    with open(path, "w") as handle:
        yaml.safe_dump(playbook, handle, sort_keys=False)
    lab.playbook(path, timeout=300)
    with open(result_path) as handle:
        return json.load(handle)


def kubectl(lab, *args, stdin=None, check=True, timeout=120):
    done = subprocess.run([KUBECTL, "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                          input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError("kubectl %s failed (%d):\n%s%s" % (" ".join(args), done.returncode, done.stdout,
                                                                done.stderr))
    return done


def get_json(lab, *args):
    return json.loads(kubectl(lab, "get", "-o", "json", *args).stdout)


def apply(lab, objects):
    kubectl(lab, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))


def eventually(check, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s (last: %r)" % (what, value))
        time.sleep(0.2)


def changes_since(lab, since, resource):
    """The object changes (``event``, ``object``) of one resource the twin recorded after ``since``."""
    found = []
    with open(os.path.join(lab.state_dir, "kube-records.jsonl")) as stream:
        for line in stream:
            if '"record":"change"' in line:
                record = json.loads(line)
                if record["ts"] >= since and record["resource"] == resource:
                    found.append(record)
    return found


def deployment(name, namespace, replicas, labels=None, volumes=None, node=None):
    labels = labels or {"app": name}
    spec = {"containers": [{"name": name, "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": 30}
    if volumes:
        spec["volumes"] = volumes
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def pdb(name, namespace, labels, min_available):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}}}


def bare_pod(name, namespace, node):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{"name": name, "image": "registry.k8s.io/pause:3.10"}]}}


def pods_on(lab, node, ns=None):
    args = ["pods", "--field-selector", "spec.nodeName=" + node] + (["-n", ns] if ns else ["-A"])
    return {"%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]): pod
            for pod in get_json(lab, *args)["items"]}


def place_on(lab, node, objects, ns, others):
    """Create ``objects`` while every node but ``node`` is cordoned, so their pods land on it, then wait for them
    to run and uncordon the others."""
    kubectl(lab, "cordon", *others)
    try:
        apply(lab, objects)
        for obj in objects:
            if obj["kind"] == "Deployment":
                kubectl(lab, "rollout", "status", "-n", ns, "deployment/" + obj["metadata"]["name"], "--timeout=60s")
    finally:
        kubectl(lab, "uncordon", *others)
