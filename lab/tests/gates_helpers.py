"""Running the collection's Kubernetes gate modules against a twin lab with real ansible, and reading the twin's
API with the official client (shared by test_gates_wait.py, test_gates_lock.py and benchmarks/gates_wait.py);
kubectl, workload builders and a playbook runner for test_gates_drain.py and test_gates_device_plugin.py."""
from __future__ import annotations

import json
import os
import subprocess
import time

import yaml

from conftest import collections_path


def module_env(lab) -> dict:
    env = dict(lab.env)
    env.update(ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_COLLECTIONS_PATH=collections_path() or "")
    return env


def module_argv(module: str, args: dict, check: bool = False) -> list:
    argv = ["ansible", "localhost", "-m", "gpuops.nvidia." + module, "-a", json.dumps(args)]
    return argv + (["--check"] if check else [])


def parse_adhoc(stdout: str) -> dict:
    """The result dict of `ansible localhost -m ...` ('localhost | SUCCESS => {...}')."""
    return json.loads(stdout[stdout.index("=> ") + 3:])


def run_module(lab, module: str, args: dict, check: bool = False, timeout: float = 180):
    """(ok, result) of one module run on localhost with the lab's kubeconfig."""
    args = dict({"kubeconfig": lab.info["kube"]["kubeconfig"]}, **args)
    done = subprocess.run(module_argv(module, args, check), capture_output=True, text=True, env=module_env(lab),
                          timeout=timeout)
    if "=> " not in done.stdout:
        raise AssertionError("no module result (%d): %s%s" % (done.returncode, done.stdout, done.stderr))
    return done.returncode == 0, parse_adhoc(done.stdout)


def start_module(lab, module: str, args: dict) -> subprocess.Popen:
    args = dict({"kubeconfig": lab.info["kube"]["kubeconfig"]}, **args)
    return subprocess.Popen(module_argv(module, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=module_env(lab))


def kube_client(lab):
    import kubernetes
    return kubernetes.config.new_client_from_config(config_file=lab.info["kube"]["kubeconfig"])


def read_node(lab, name: str) -> dict:
    import kubernetes
    response = kubernetes.client.CoreV1Api(kube_client(lab)).read_node(name, _preload_content=False)
    return json.loads(response.data)


def requests(state_dir: str, since: float, verb=None, path_part: str = "", user_agent_part: str = "") -> list:
    """Requests the twin's API server recorded (when each ended) since `since` (epoch seconds)."""
    found = []
    with open(os.path.join(state_dir, "kube-records.jsonl")) as stream:
        for line in stream:
            if '"record":"request"' not in line:
                continue
            record = json.loads(line)
            if record["ts"] >= since and (verb is None or record.get("verb") == verb) \
                    and path_part in record.get("path", "") and user_agent_part in (record.get("user_agent") or ""):
                found.append(record)
    return found


def read_lease(lab, namespace: str, name: str) -> dict:
    import kubernetes
    response = kubernetes.client.CoordinationV1Api(kube_client(lab)).read_namespaced_lease(
        name, namespace, _preload_content=False)
    return json.loads(response.data)


def watch_requests(state_dir: str, since: float, path_part: str = "/nodes") -> int:
    """Watch requests on paths containing `path_part` that ended since `since` (a watch is recorded when it
    closes)."""
    return len(requests(state_dir, since, "watch", path_part))


def wait_listed(state_dir: str, since: float, user_agent_part: str, path_part: str = "/nodes",
                timeout_s: float = 120.0) -> None:
    """Waits until a client (by user agent) has listed `path_part` since `since`: its watch follows at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if requests(state_dir, since, "list", path_part, user_agent_part):
            return
        time.sleep(0.1)
    raise AssertionError("no list of %s by %s within %ss" % (path_part, user_agent_part, timeout_s))


# --- playbook runs, kubectl and workloads (node_drain, device_plugin_restart) ---------------------------------------

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
