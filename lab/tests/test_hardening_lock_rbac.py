"""Issue 27 on the fleet twin: the rollout lock cannot be taken over by reusing a run id, and the runner's RBAC
(deploy/rbac/) refuses what its steps do not need.

- Two real driver_upgrade runs with the same gpuops_run_id (so the same holder name): the first holds the lock
  (soaking its canary); the second, started from another run record directory, has not the first run's token:
  its lock task is refused, it changes nothing, and the first run finishes and releases its own lock.
- The runner's ServiceAccount token against the API twin (which enforces RBAC with kube-apiserver's 403): the
  kubelet Lease of a node, the kube-controller-manager Lease, another Lease in its own namespace, a pod in
  kube-system, a pod deleted outside the smoke-test and device-plugin namespaces, the lock in kube-system: each
  refused, naming the right it lacks; and `kubectl apply -f deploy/rbac/` does not bind the GPU Operator role.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import time

import pytest
import yaml

from conftest import REPO_DIR, collections_path, start_lab, stop_lab
from rbac_steps import KUBECTL, LOCK, LOCK_NAMESPACE, get_json, kubectl, run_step, token_kubeconfig
from upgrade_helpers import NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL) or collections_path() is None,
                                reason="needs /usr/bin/kubectl and the collection on ANSIBLE_COLLECTIONS_PATH")

RUNNER = "system:serviceaccount:gpuops-system:gpuops-runner"
RUN_ID = "it-same-run-id"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("hardening") / "state")
    running = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    try:
        kubectl(running, "apply", "-f", os.path.join(REPO_DIR, "deploy", "rbac"))
        token = kubectl(running, "-n", "gpuops-system", "create", "token", "gpuops-runner",
                        "--duration", "2h").stdout.strip()
        running.runner_kubeconfig = token_kubeconfig(running, os.path.join(state_dir, "runner.kubeconfig"), token)
        yield running
    finally:
        stop_lab(running)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def lease(lab, namespace, name):
    found = kubectl(lab, "-n", namespace, "get", "lease", name, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def wait_for(check, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("timed out waiting for " + what)


# --------------------------------------------------------------------------- point 1: the run id is not a key

def test_a_second_run_with_the_first_runs_id_cannot_take_or_release_its_live_lock(lab, tmp_path):
    first = Fleet(lab, tmp_path / "first")
    second = Fleet(lab, tmp_path / "second")   # another operator, another controller: another run record dir
    token_file = os.path.join(first.record_dir, "driver-upgrade-%s.lock-token" % RUN_ID)
    # the canary soaks for a minute with the lock held: the second run comes in then
    process = first.run(background=True, gpuops_confirm="gpulab", gpuops_run_id=RUN_ID,
                        gpuops_soak_seconds={"canary": 60, "batch": 0})
    try:
        wait_for(lambda: (first.record(first.nodes()["gpu-node-01"]) or {}).get("state") == "done"
                 or process.poll() is not None, 600, "the canary to be done")
        assert process.poll() is None, process.stdout.read()[-4000:]
        held = lease(lab, "kube-system", "gpuops-nvidia-rollout")
        holder = held["spec"]["holderIdentity"]
        assert holder.endswith("/" + RUN_ID)
        with open(token_file) as stream:
            token = stream.read().strip()
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        assert held["metadata"]["annotations"]["gpuops.nvidia/holder-token-sha256"] not in ("", token)

        since = time.time()
        rc, output = second.run(check=False, gpuops_confirm="gpulab", gpuops_run_id=RUN_ID)
        assert rc != 0
        assert "the holder this run names, but this run does not hold its token" in output
        assert token not in output
        after = lease(lab, "kube-system", "gpuops-nvidia-rollout")
        assert after["spec"]["holderIdentity"] == holder
        assert after["metadata"]["annotations"] == held["metadata"]["annotations"]
        assert second.record(second.nodes()["gpu-node-02"]) is None        # the second run touched no node
        assert second.boots(since) == {}
        assert not os.path.exists(os.path.join(second.record_dir, "driver-upgrade-%s.json" % RUN_ID))

        output, _ = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output[-4000:]
    assert token not in output
    assert all(first.record(node)["state"] == "done" for node in first.nodes().values())
    assert all(node["metadata"]["labels"].get("nvidia.com/cuda.driver-version.full", NEW) == NEW
               for node in first.nodes().values())
    assert first.lock_holder() is None                   # released by the run that held it, at its end
    assert not os.path.exists(token_file)


# --------------------------------------------------------------------------- point 8: the runner's RBAC

def forbidden(done, verb, resource, group, namespace):
    """Whether kubectl's output carries kube-apiserver's 403 for this right."""
    text = done.stdout + done.stderr
    return done.returncode != 0 and (
        'User "%s" cannot %s resource "%s" in API group "%s" in the namespace "%s"'
        % (RUNNER, verb, resource, group, namespace)) in text


def as_runner(lab, *args, stdin=None):
    return kubectl(lab, *args, stdin=stdin, check=False, kubeconfig=lab.runner_kubeconfig)


def test_the_runner_cannot_replace_a_nodes_kubelet_lease(lab):
    heartbeat = lease(lab, "kube-node-lease", "gpu-node-01")
    assert heartbeat is not None
    heartbeat["spec"]["holderIdentity"] = "gpuops-runner"
    done = as_runner(lab, "replace", "-f", "-", stdin=json.dumps(heartbeat))
    assert forbidden(done, "update", "leases", "coordination.k8s.io", "kube-node-lease"), done.stderr
    assert lease(lab, "kube-node-lease", "gpu-node-01")["spec"]["holderIdentity"] == "gpu-node-01"


def test_the_runner_cannot_create_the_controller_managers_lease_in_kube_system(lab):
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kube-controller-manager", "namespace": "kube-system"},
            "spec": {"holderIdentity": "gpuops-runner", "leaseDurationSeconds": 15}}
    done = as_runner(lab, "create", "-f", "-", stdin=json.dumps(body))
    assert forbidden(done, "create", "leases", "coordination.k8s.io", "kube-system"), done.stderr


def test_the_runner_may_update_only_the_lock_lease_in_its_own_namespace(lab):
    kubectl(lab, "-n", LOCK_NAMESPACE, "create", "-f", "-", stdin=json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "someone-elses", "namespace": LOCK_NAMESPACE}, "spec": {"holderIdentity": "them"}}))
    other = lease(lab, LOCK_NAMESPACE, "someone-elses")
    other["spec"]["holderIdentity"] = "gpuops-runner"
    done = as_runner(lab, "replace", "-f", "-", stdin=json.dumps(other))
    assert forbidden(done, "update", "leases", "coordination.k8s.io", LOCK_NAMESPACE), done.stderr
    done = as_runner(lab, "-n", LOCK_NAMESPACE, "get", "lease", "someone-elses")
    assert forbidden(done, "get", "leases", "coordination.k8s.io", LOCK_NAMESPACE), done.stderr


def test_the_rollout_lock_works_in_the_runners_namespace_and_is_refused_in_kube_system(lab):
    args = {"name": LOCK, "holder": "sre@bastion/rbac-hardening", "ttl": 60}
    ok, result = run_step(lab, lab.runner_kubeconfig, "rollout_lock", dict(args, namespace=LOCK_NAMESPACE))
    assert ok, result.get("msg")
    ok, result = run_step(lab, lab.runner_kubeconfig, "rollout_lock", dict(args, namespace=LOCK_NAMESPACE,
                                                                             state="released"))
    assert ok, result.get("msg")
    ok, result = run_step(lab, lab.runner_kubeconfig, "rollout_lock", dict(args, namespace="kube-system"))
    assert not ok
    assert 'cannot get resource \\"leases\\" in API group \\"coordination.k8s.io\\" in the namespace ' \
           '\\"kube-system\\"' in json.dumps(result["msg"])


def test_the_runner_cannot_create_a_pod_in_kube_system(lab):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-ours", "namespace": "kube-system"},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    done = as_runner(lab, "create", "-f", "-", stdin=json.dumps(pod))
    assert forbidden(done, "create", "pods", "", "kube-system"), done.stderr
    assert kubectl(lab, "-n", "kube-system", "get", "pod", "not-ours", check=False).returncode != 0


def test_the_runner_deletes_pods_only_in_the_smoke_test_and_device_plugin_namespaces(lab):
    kubectl(lab, "create", "namespace", "team-a")
    done = as_runner(lab, "-n", "team-a", "delete", "pod", "trainer-0")
    assert forbidden(done, "delete", "pods", "", "team-a"), done.stderr
    done = as_runner(lab, "-n", "team-a", "create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}}))
    assert forbidden(done, "create", "pods", "", "team-a"), done.stderr
    asked = (("create", "default"), ("delete", "default"), ("delete", "kube-system"), ("create", "kube-system"),
             ("delete", "gpu-operator"), ("delete", "team-a"))
    answers = [as_runner(lab, "auth", "can-i", verb, "pods", "-n", namespace).stdout.strip()
               for verb, namespace in asked]
    assert dict(zip(asked, answers)) == {("create", "default"): "yes", ("delete", "default"): "yes",
                                         ("delete", "kube-system"): "yes", ("create", "kube-system"): "no",
                                         ("delete", "gpu-operator"): "no", ("delete", "team-a"): "no"}


def test_applying_the_folder_does_not_bind_the_gpu_operator_role(lab):
    bindings = get_json(lab, "clusterrolebindings")["items"]
    assert "gpuops-runner-gpu-operator" not in [binding["metadata"]["name"] for binding in bindings]
    roles = get_json(lab, "clusterroles")["items"]
    assert "gpuops-runner-gpu-operator" not in [role["metadata"]["name"] for role in roles]
    with open(os.path.join(REPO_DIR, "deploy", "rbac", "gpu-operator", "20-clusterrole.yml")) as stream:
        operator_role = yaml.safe_load(stream)
    assert any("patch" in rule["verbs"] for rule in operator_role["rules"])
    secrets = as_runner(lab, "get", "secrets", "-A")
    assert 'User "%s" cannot list resource "secrets"' % RUNNER in secrets.stderr
