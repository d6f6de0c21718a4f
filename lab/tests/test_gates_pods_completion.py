"""gpuops.nvidia.pods_completion_wait over real HTTPS against the twin, run with real ansible: a matching Job's pod
that finishes lets the wait pass once it is done (never before), and one that outlives the timeout fails the wait
naming the pod, while pods that do not match the selector or run on another node are never waited for.
Uses the session lab; the Jobs' pods run their command inside the node twins."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import yaml

from gpulab.testkit.modules import run_module

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs kubectl on PATH")
SELECTOR = "gpuops.nvidia/wait-before-drain=true"


def kubectl(lab, *args, stdin=None, check=True):
    result = subprocess.run([KUBECTL, "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                            input=stdin, capture_output=True, text=True, timeout=90)
    if check and result.returncode != 0:
        raise AssertionError("kubectl %s failed:\n%s%s" % (" ".join(args), result.stdout, result.stderr))
    return result


def job(name, node, seconds, labels):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": dict(labels, app=name)},
                "spec": {"nodeName": node, "restartPolicy": "Never",
                         "containers": [{"name": "train", "image": "busybox", "command": ["sleep", str(seconds)]}]}}}}


def pod_of(lab, name, within=30.0):
    # the twin's Job controller creates the pod a moment after the Job is applied, later on a loaded machine
    deadline = time.monotonic() + within
    while True:
        pods = kubectl(lab, "get", "pods", "-l", "app=" + name, "-o",
                       "jsonpath={.items[*].metadata.name}").stdout.split()
        if pods or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(pods) == 1, pods
    return pods[0]


def phase(lab, pod):
    return kubectl(lab, "get", "pod", pod, "-o", "jsonpath={.status.phase}").stdout


def wait_running(lab, name):
    pod = pod_of(lab, name)
    kubectl(lab, "wait", "pod/" + pod, "--for=jsonpath={.status.phase}=Running", "--timeout=60s")
    return pod


@pytest.fixture()
def jobs(lab):
    names = []

    def start(name, node, seconds, labels):
        names.append(name)
        kubectl(lab, "apply", "-f", "-", stdin=yaml.safe_dump(job(name, node, seconds, labels)))
        return wait_running(lab, name)

    yield start
    for name in names:
        kubectl(lab, "delete", "job", name, "--cascade=foreground", "--wait=false", check=False)
        kubectl(lab, "delete", "pods", "-l", "app=" + name, "--grace-period=0", "--wait=false", check=False)


def test_the_wait_passes_once_the_matching_job_has_finished_and_not_before(lab, jobs):
    node, other = lab.node_names[0], lab.node_names[1]
    pod = jobs("train-short", node, 6, {"gpuops.nvidia/wait-before-drain": "true"})
    jobs("unmarked-long", node, 600, {})                                          # no label: not waited for
    jobs("elsewhere-long", other, 600, {"gpuops.nvidia/wait-before-drain": "true"})   # another node
    started = time.monotonic()
    ok, result = run_module(lab, "pods_completion_wait", {"node": node, "selector": SELECTOR, "timeout": 90})
    assert ok, result
    assert result["running"] == [] and phase(lab, pod) == "Succeeded"
    # it waited for the Job's pod to end (6 s from its start), not for the unmarked or the other node's pods
    assert 1.0 <= time.monotonic() - started < 60, result


def test_a_matching_job_that_outlives_the_timeout_fails_the_wait_naming_its_pod(lab, jobs):
    node = lab.node_names[2]
    pod = jobs("train-endless", node, 600, {"gpuops.nvidia/wait-before-drain": "true"})
    ok, result = run_module(lab, "pods_completion_wait", {"node": node, "selector": SELECTOR, "timeout": 3})
    assert not ok, result
    assert result["running"] == ["default/" + pod], result
    assert pod in result["msg"] and phase(lab, pod) == "Running"


def test_in_check_mode_it_reports_the_matching_pods_once_and_does_not_wait(lab, jobs):
    node = lab.node_names[2]
    pod = jobs("train-checked", node, 600, {"gpuops.nvidia/wait-before-drain": "true"})
    started = time.monotonic()
    _ok, result = run_module(lab, "pods_completion_wait", {"node": node, "selector": SELECTOR, "timeout": 600},
                             check=True)
    assert time.monotonic() - started < 30
    assert "default/" + pod in result["running"], result
