# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a pod's JSON says of it, read once for every module that judges pods (the drain, the wait for Jobs, the
device plugin's restart, the fleet's health): its key, finished or alive, Ready or not, restarts, and what keeps
it from being ready in the words ``kubectl get pods`` and ``kubectl describe`` use."""

from __future__ import annotations

FINISHED_PHASES = ("Succeeded", "Failed")


def pod_key(pod):
    """``namespace/name`` of a pod."""
    metadata = pod.get("metadata") or {}
    return "%s/%s" % (metadata.get("namespace"), metadata.get("name"))


def is_finished(pod):
    """Its phase is Succeeded or Failed: its containers have ended and will not run again."""
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def is_alive(pod):
    """Not terminating and not finished."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and not is_finished(pod)


def is_ready(pod):
    """The pod's Ready condition is True."""
    return any(condition.get("type") == "Ready" and condition.get("status") == "True"
               for condition in (pod.get("status") or {}).get("conditions") or [])


def _container_statuses(pod):
    return (pod.get("status") or {}).get("containerStatuses") or []


def restart_count(pod):
    """Restarts of all the pod's containers together (the RESTARTS column of ``kubectl get pods``)."""
    return sum(int(status.get("restartCount") or 0) for status in _container_statuses(pod))


def waiting_reason(pod):
    """The first container's waiting reason (CrashLoopBackOff, ImagePullBackOff ...), or None."""
    for status in _container_statuses(pod):
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return waiting["reason"]
    return None


def not_ready_reason(pod):
    """Why a pod is not ready: the first container that says something (its waiting reason, its restarts and its
    last termination's exit code and message), else the pod's phase when it is not Running; None when the pod says
    nothing of it."""
    status = pod.get("status") or {}
    parts = []
    for container in _container_statuses(pod):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            parts.append(waiting["reason"])
        if container.get("restartCount"):
            parts.append("%d restarts" % container["restartCount"])
        terminated = ((container.get("lastState") or {}).get("terminated")
                      or (container.get("state") or {}).get("terminated") or {})
        if terminated:
            message = (terminated.get("message") or terminated.get("reason") or "").strip().splitlines()
            parts.append("last exit %s%s" % (terminated.get("exitCode"), ": " + message[-1] if message else ""))
        if parts:
            break
    if not parts and status.get("phase") and status.get("phase") != "Running":
        parts.append(status["phase"])
    return ", ".join(parts) or None
