"""A pod's command runs: real `kubectl run` against the twin's HTTPS API, the kubelet running the container's
command as a process of its node (FakeNodeViews with `host_processes`: the fake node's namespaces are the
host's). `echo hello` logs hello, `false` crash-loops with growing back-off, a deleted pod's process gets
SIGTERM then SIGKILL after the grace period, a program the node lacks runs until deleted."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from test_kube_cluster_kubectl import eventually, jsonpath, kubectl, pytestmark  # noqa: F401 (skip without kubectl)


@pytest.fixture
def twin(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8), host_processes=True) for index in range(2)]
    cluster = KubeCluster(str(tmp_path), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.4,
                          container_start_s=0.3).start()
    yield cluster
    cluster.stop()


def container_status(twin, pod):
    return json.loads(kubectl(twin, "get", "pod", pod, "-o", "json").stdout)["status"]["containerStatuses"][0]


def marker_processes(marker):
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if marker in line and "ps -eo" not in line]


def test_echo_hello_logs_hello_and_the_pod_succeeds(twin):
    kubectl(twin, "run", "hello", "--image=busybox", "--restart=Never", "--", "echo", "hello")
    kubectl(twin, "wait", "pod/hello", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=30s")
    assert kubectl(twin, "logs", "hello").stdout == "hello\n"
    terminated = container_status(twin, "hello")["state"]["terminated"]
    assert terminated["reason"] == "Completed" and terminated["exitCode"] == 0


def test_a_failing_command_with_restart_never_fails_the_pod_with_its_exit_code(twin):
    kubectl(twin, "run", "exit3", "--image=busybox", "--restart=Never", "--", "sh", "-c", "echo bye >&2; exit 3")
    kubectl(twin, "wait", "pod/exit3", "--for=jsonpath={.status.phase}=Failed", "--timeout=30s")
    terminated = container_status(twin, "exit3")["state"]["terminated"]
    assert terminated["reason"] == "Error" and terminated["exitCode"] == 3
    assert kubectl(twin, "logs", "exit3").stdout == "bye\n"


def test_false_crash_loops_with_growing_back_off(twin):
    kubectl(twin, "run", "crash", "--image=busybox", "--", "false")
    back_offs, restarts = [], []
    deadline = time.time() + 30
    while time.time() < deadline and len(back_offs) < 3:
        status = container_status(twin, "crash")
        waiting = status["state"].get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff" and (not restarts or status["restartCount"] != restarts[-1]):
            back_offs.append(waiting["message"])
            restarts.append(status["restartCount"])
            assert status["lastState"]["terminated"]["exitCode"] == 1
            assert status["lastState"]["terminated"]["reason"] == "Error"
        time.sleep(0.1)
    assert restarts == sorted(restarts) and len(set(restarts)) == 3, (restarts, back_offs)
    pod = kubectl(twin, "get", "pod", "crash").stdout.splitlines()[1].split()
    assert pod[2] in ("CrashLoopBackOff", "Running", "Error")
    assert jsonpath(twin, "pod crash", "{.status.phase}") == "Running"
    waits = [go_seconds(re.match(r"back-off (\S+) restarting failed container=crash pod=crash_default",
                                 message).group(1)) for message in back_offs]
    assert waits == sorted(waits) and waits[-1] > waits[0], back_offs


def go_seconds(text):
    """Seconds of a Go duration as the kubelet prints it (400ms, 1.6s, 1m20s)."""
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    minutes, _, seconds = text[:-1].rpartition("m")
    return float(minutes or 0) * 60 + float(seconds)


def test_deleting_a_pod_terms_then_kills_its_process_after_the_grace_period(twin):
    marker = "3141%d" % (time.time() % 1000)
    kubectl(twin, "run", "stubborn", "--image=busybox", "--restart=Never", "--", "sh", "-c",
            "trap '' TERM; sleep %s" % marker)
    kubectl(twin, "wait", "pod/stubborn", "--for=condition=Ready", "--timeout=30s")
    eventually(lambda: marker_processes(marker), what="the container's process")
    started = time.time()
    kubectl(twin, "delete", "pod", "stubborn", "--grace-period=2", "--wait=true", "--timeout=30s")
    assert time.time() - started >= 1.5      # SIGTERM ignored: the pod goes once SIGKILL ends it
    eventually(lambda: not marker_processes(marker), timeout_s=5, what="no process left")


def test_a_program_the_node_does_not_have_runs_until_deleted(twin):
    kubectl(twin, "run", "missing", "--image=busybox", "--", "no-such-program-here", "--serve")
    kubectl(twin, "wait", "pod/missing", "--for=condition=Ready", "--timeout=30s")
    time.sleep(1)
    status = container_status(twin, "missing")
    assert "running" in status["state"] and status["restartCount"] == 0
    kubectl(twin, "delete", "pod", "missing", "--timeout=30s")


def test_a_node_at_its_process_bound_starts_the_next_container_when_one_ends(twin):
    twin.kubelets["gpu-0"].processes.max_processes = 1
    overrides = json.dumps({"apiVersion": "v1", "spec": {"nodeName": "gpu-0"}})
    for name in ("first", "second"):
        kubectl(twin, "run", name, "--image=busybox", "--restart=Never", "--overrides=" + overrides, "--",
                "sleep", "30")
    kubectl(twin, "wait", "pod/first", "--for=condition=Ready", "--timeout=30s")
    time.sleep(0.5)
    waiting = container_status(twin, "second")["state"]["waiting"]
    assert waiting["reason"] == "ContainerCreating"
    kubectl(twin, "delete", "pod", "first", "--timeout=30s")
    kubectl(twin, "wait", "pod/second", "--for=condition=Ready", "--timeout=30s")
