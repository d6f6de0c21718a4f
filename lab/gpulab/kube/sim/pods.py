"""How the simulated kubelet runs pod containers: which pods run `nvidia-smi` in the node twin, restarts,
container ids, the pod status every kubelet write carries, and the container logs the API server's pods/log
handler reads."""
from __future__ import annotations

import hashlib
import shlex
import threading

from ..api.timefmt import rfc3339


class PodLogs:
    """Container logs by (namespace, pod name, container), read by the API server's pods/log handler. A log kept
    without a container name is the pod's single container's."""

    def __init__(self):
        self._lock = threading.Lock()
        self._logs = {}

    def set(self, namespace: str, name: str, text: str, container=None) -> None:
        with self._lock:
            self._logs[(namespace, name, container)] = text

    def append(self, namespace: str, name: str, text: str, container=None) -> None:
        with self._lock:
            key = (namespace, name, container)
            self._logs[key] = self._logs.get(key, "") + text

    def get(self, namespace: str, name: str, container=None):
        with self._lock:
            if container is not None and (namespace, name, container) in self._logs:
                return self._logs[(namespace, name, container)]
            return self._logs.get((namespace, name, None))

    def drop(self, namespace: str, name: str) -> None:
        with self._lock:
            for key in [key for key in self._logs if key[:2] == (namespace, name)]:
                del self._logs[key]


_SHELLS = ("sh", "bash")
_SHELL_SYNTAX = set(";|&<>$`()")


def command_argv(pod: dict):
    """argv of a single-container pod whose command is nvidia-smi (directly or as `sh -c "nvidia-smi ..."`
    without other shell syntax), else None."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) != 1:
        return None
    argv = list(containers[0].get("command") or []) + list(containers[0].get("args") or [])
    if len(argv) == 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1] == "-c" \
            and not _SHELL_SYNTAX & set(argv[2]):
        argv = shlex.split(argv[2])
    if argv and argv[0].rsplit("/", 1)[-1] == "nvidia-smi":
        return ["nvidia-smi"] + argv[1:]
    return None


def restarts_after_exit(pod: dict, exit_code: int) -> bool:
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def container_id(pod_uid: str, attempt: int) -> str:
    return "containerd://" + hashlib.sha256(("%s/%d" % (pod_uid, attempt)).encode()).hexdigest()


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (the kubelet's back-off message): 400ms, 10s, 1m20s, 5m0s."""
    if seconds < 1:
        return "%dms" % round(seconds * 1000)
    minutes, rest = divmod(seconds, 60)
    text = ("%.3f" % rest).rstrip("0").rstrip(".") + "s"
    return "%dm%s" % (minutes, text) if minutes else text


def pod_status_base(pod: dict, now: float, ready: bool, node_ip: str) -> dict:
    """The pod status fields every kubelet write carries: IPs, startTime, the five conditions."""
    previous = pod.get("status") or {}
    start_time = previous.get("startTime") or rfc3339(now)
    scheduled = next((c for c in previous.get("conditions") or [] if c.get("type") == "PodScheduled"),
                     {"type": "PodScheduled", "status": "True", "lastTransitionTime": start_time})
    flag = "True" if ready else "False"
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": start_time},
        {"type": "Initialized", "status": "True", "lastTransitionTime": start_time},
        {"type": "Ready", "status": flag, "lastTransitionTime": rfc3339(now)},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": rfc3339(now)},
        scheduled,
    ]
    for condition in conditions[2:4]:
        if not ready:
            condition.update(reason="ContainersNotReady",
                             message="containers with unready status: [%s]" % " ".join(
                                 c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []))
    return {"hostIP": node_ip, "hostIPs": [{"ip": node_ip}], "podIP": pod_ip(pod),
            "podIPs": [{"ip": pod_ip(pod)}], "startTime": start_time, "conditions": conditions}


def pod_ip(pod: dict) -> str:
    digest = hashlib.md5(((pod.get("metadata") or {}).get("uid") or "").encode()).digest()
    return "10.244.%d.%d" % (digest[0], max(2, digest[1]))


def plain_amount(amount) -> str:
    """A Decimal resource amount as the kubelet prints it (no exponent, no trailing zeros)."""
    return format(amount.normalize(), "f")
