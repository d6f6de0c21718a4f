"""Pods of several containers that each give a command: every container runs as its own process in the node
twin (`ContainerProcesses`, keyed `UID/CONTAINER`), with its own log (`kubectl logs POD -c NAME`) and its own
state in `containerStatuses`. The pod ends when all its containers have exited: Succeeded when all exited 0,
else Failed; with restartPolicy Always (OnFailure and a failed container) the pod's containers restart
together after the crash back-off (the twin's simplification of per-container restarts).

A pod with a container without a command (the image's entrypoint, which the twin lacks) or a program the node
lacks stays the kubelet's long-running stand-in, as a single-container one does.
"""
from __future__ import annotations

from ..api.timefmt import rfc3339
from .objects import meta
from .pods import container_id, go_duration, pod_status_base, restarts_after_exit


def container_argv(container: dict):
    argv = [str(word) for word in list(container.get("command") or []) + list(container.get("args") or [])]
    return argv or None


def container_env(container: dict) -> dict:
    return {item["name"]: str(item.get("value", "")) for item in container.get("env") or []
            if isinstance(item, dict) and item.get("name") and "valueFrom" not in item}


def process_key(uid: str, container: dict) -> str:
    return "%s/%s" % (uid, container.get("name"))


class MultiContainerPods:
    """The kubelet's runs of pods of several commands (`handles`, `sync`); state in the kubelet's runtime."""

    def __init__(self, kubelet):
        self.kubelet = kubelet

    def handles(self, pod: dict) -> bool:
        containers = (pod.get("spec") or {}).get("containers") or []
        processes = self.kubelet.processes
        return len(containers) > 1 and processes.available() and \
            meta(pod).get("uid") not in processes.missing_program and \
            all(container_argv(container) for container in containers)

    def sync(self, pod: dict, now: float) -> None:
        kubelet, processes = self.kubelet, self.kubelet.processes
        uid, namespace, name = meta(pod).get("uid"), meta(pod).get("namespace"), meta(pod)["name"]
        containers = (pod.get("spec") or {}).get("containers") or []
        runtime = kubelet._runtime.get(uid)
        if runtime is None or runtime["needs_restart"] or (
                runtime["state"] == "crashed" and now >= runtime["next_attempt"]):
            for container in containers:
                processes.forget(process_key(uid, container))
            for container in containers:
                kubelet.logs.set(namespace, name, "", container.get("name"))
                started = processes.start(process_key(uid, container), namespace, name, container_argv(container),
                                          container_env(container), container=container.get("name"))
                if not started:
                    for other in containers:
                        processes.forget(process_key(uid, other))
                    if started is False:       # a program the node lacks: the long-running stand-in
                        processes.missing_program.add(uid)
                        kubelet._sync_long_running_pod(pod, now)
                    return                     # at the process bound: tried again at the next pass
            runtime = kubelet._start_container(pod, now)
            runtime.update(state="running", exits={})
            self._write(pod, runtime, now)
            return
        if runtime["state"] != "running":
            return
        exits = runtime.setdefault("exits", {})
        changed = False
        for container in containers:
            code = processes.exit_code(process_key(uid, container))
            if code is not None and container.get("name") not in exits:
                exits[container.get("name")] = (code, now)
                changed = True
        if len(exits) < len(containers):
            if changed:
                self._write(pod, runtime, now)
            return
        for container in containers:
            processes.forget(process_key(uid, container))
        worst = next((code for code, _ in exits.values() if code != 0), 0)
        if restarts_after_exit(pod, worst):
            backoff_s = min(kubelet.config.max_crash_backoff_s,
                            kubelet.config.crash_backoff_s * (2 ** runtime["attempt"]))
            runtime.update(state="crashed", next_attempt=now + backoff_s)
            self._write(pod, runtime, now, back_off=backoff_s)
        else:
            runtime["state"] = "terminated"
            self._write(pod, runtime, now)

    def _write(self, pod: dict, runtime: dict, now: float, back_off=None) -> None:
        uid = meta(pod).get("uid")
        exits = runtime.get("exits") or {}
        statuses = []
        for index, container in enumerate((pod.get("spec") or {}).get("containers") or []):
            status = {"name": container.get("name"), "image": container.get("image", ""), "imageID": "",
                      "containerID": container_id(uid, runtime["attempt"] * 100 + index), "ready": False,
                      "started": False, "restartCount": runtime["restart_count"], "lastState": {}}
            if container.get("name") in exits:
                code, finished = exits[container.get("name")]
                terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                              "startedAt": rfc3339(runtime["started_at"]), "finishedAt": rfc3339(finished),
                              "containerID": status["containerID"]}
                if back_off is None:
                    status["state"] = {"terminated": terminated}
                else:
                    status["lastState"] = {"terminated": terminated}
                    status["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                        "back-off %s restarting failed container=%s pod=%s_%s(%s)" % (
                            go_duration(back_off), container.get("name"), meta(pod)["name"],
                            meta(pod).get("namespace"), uid))}}
            else:
                status.update(ready=True, started=True,
                              state={"running": {"startedAt": rfc3339(runtime["started_at"])}})
            statuses.append(status)
        ready = all(status["ready"] for status in statuses)
        pod_status = pod_status_base(pod, now, ready, self.kubelet.node_ip)
        if runtime["state"] == "terminated":
            codes = [code for code, _ in exits.values()]
            for condition in pod_status["conditions"][2:4]:
                condition.update(reason="PodCompleted", message="")
            phase = "Succeeded" if not any(codes) else "Failed"
        else:
            phase = "Running"
        pod_status.update({"phase": phase, "containerStatuses": statuses})
        self.kubelet.client.patch("pods", pod, {"status": pod_status}, subresource="status")
