# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Pod JSON shaped as kube-apiserver serves it (core/v1 PodStatus: phase, conditions, containerStatuses with
# state/lastState); the crash-looping device plugin is the one of chaos seed 2008.

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import pods as _pods


def pod(phase="Running", ready=True, containers=None, terminating=False):
    metadata = {"name": "p", "namespace": "kube-system"}
    if terminating:
        metadata["deletionTimestamp"] = "2026-12-03T03:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "True"},
                                             {"type": "Ready", "status": "True" if ready else "False"}]}
    if containers is not None:
        status["containerStatuses"] = containers
    return {"metadata": metadata, "status": status}


CRASH_LOOPING = {
    "name": "nvidia-device-plugin-ctr", "ready": False, "restartCount": 3,
    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
    "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                 "message": "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND\n"}}}
SIDECAR = {"name": "sidecar", "ready": True, "restartCount": 2, "state": {"running": {}}}


def test_the_key_is_namespace_and_name_and_finished_is_succeeded_or_failed():
    assert _pods.pod_key(pod()) == "kube-system/p"
    assert _pods.is_finished(pod("Succeeded", ready=False)) and _pods.is_finished(pod("Failed", ready=False))
    assert not _pods.is_finished(pod()) and not _pods.is_finished(pod("Pending", ready=False))


def test_alive_means_neither_terminating_nor_finished():
    assert _pods.is_alive(pod())
    assert _pods.is_alive(pod("Pending", ready=False))
    assert not _pods.is_alive(pod(terminating=True))
    assert not _pods.is_alive(pod("Succeeded", ready=False))
    assert not _pods.is_alive(pod("Failed", ready=False))


def test_ready_is_the_ready_condition_only():
    assert _pods.is_ready(pod())
    assert not _pods.is_ready(pod(ready=False))
    assert not _pods.is_ready({"status": {"phase": "Running"}})


def test_restarts_add_up_over_the_containers_and_the_waiting_reason_is_the_first_said():
    looping = pod(ready=False, containers=[SIDECAR, CRASH_LOOPING])
    assert _pods.restart_count(looping) == 5
    assert _pods.waiting_reason(looping) == "CrashLoopBackOff"
    assert _pods.restart_count(pod()) == 0 and _pods.waiting_reason(pod()) is None


def test_why_not_ready_names_the_first_container_that_says_something_in_kubectls_words():
    assert _pods.not_ready_reason(pod(ready=False, containers=[CRASH_LOOPING])) == \
        "CrashLoopBackOff, 3 restarts, last exit 1: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"
    # the sidecar's restarts say something first: its line, not the plugin's
    assert _pods.not_ready_reason(pod(ready=False, containers=[SIDECAR, CRASH_LOOPING])) == "2 restarts"
    assert _pods.not_ready_reason(pod("Pending", ready=False)) == "Pending"
    assert _pods.not_ready_reason(pod()) is None
