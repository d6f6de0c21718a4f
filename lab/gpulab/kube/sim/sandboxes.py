"""Pod sandboxes the node's containerd cannot create: the kubelet's side of ``NodeView.container_runtime_blocker``.

A node twin whose containerd runs (``NodeView.container_runtime_judged``, a cheap read) is asked, for each new pod,
whether its containerd would create the pod's sandbox under the runtime handler the pod asks for (its
``runtimeClassName``, taken as the handler, or the default runtime). The question runs a command in the node, so
it goes to the kubelet's thread pool and the pod waits for the answer. A refused pod stays Pending, its containers
waiting in ``ContainerCreating``, with a ``FailedCreatePodSandBox`` event carrying containerd's CRI error, and is
asked again after the crash back-off, as a real kubelet retries. Views without the methods, and nodes whose
containerd is not judged, run pods as before.
"""
from __future__ import annotations

from .objects import meta
from .pods import pod_status_base


class Sandboxes:
    def __init__(self, kubelet):
        self.kubelet = kubelet
        self._checks = {}        # pod uid -> Future of the node's answer

    def forget(self, uid) -> None:
        self._checks.pop(uid, None)

    def forget_all_but(self, present: set) -> None:
        for uid in [uid for uid in self._checks if uid not in present]:
            del self._checks[uid]

    def failing(self, pod: dict, now: float) -> bool:
        """True while the pod's sandbox is not created (an answer awaited, or containerd refused it)."""
        kubelet = self.kubelet
        uid = meta(pod).get("uid")
        runtime = kubelet._runtime.get(uid)
        if runtime is not None and runtime.get("state") != "sandbox":
            return False                                    # created already: the pod runs its course
        judged = getattr(kubelet.view, "container_runtime_judged", None)
        blocker = getattr(kubelet.view, "container_runtime_blocker", None)
        if not (callable(judged) and callable(blocker)):
            return False
        check = self._checks.get(uid)
        if check is None:
            if runtime is not None and now < runtime["next_attempt"]:
                return True
            if not judged():
                kubelet._runtime.pop(uid, None)
                return False
            handler = (pod.get("spec") or {}).get("runtimeClassName")
            self._checks[uid] = kubelet.executor.submit(self._ask, blocker, handler)
            return True
        if not check.done():
            return True
        del self._checks[uid]
        error = check.result()
        if error is None:
            kubelet._runtime.pop(uid, None)
            return False
        if runtime is None:
            runtime = kubelet._runtime[uid] = {"attempt": 0, "restart_count": 0, "started_at": now,
                                               "needs_restart": False, "state": "sandbox", "tries": 0}
        runtime["tries"] += 1
        runtime["next_attempt"] = now + min(kubelet.config.max_crash_backoff_s, kubelet.config.crash_backoff_s)
        kubelet.client.record_event(pod, "FailedCreatePodSandBox", "Failed to create pod sandbox: %s" % error,
                                    "Warning", component="kubelet")
        if runtime["tries"] == 1:
            self._write(pod, now)
        return True

    def _ask(self, blocker, handler):
        try:
            return blocker(handler)
        except Exception:  # the node went down meanwhile: its pods wait for it as before
            return None
        finally:
            self.kubelet.client.informer.changed.set()

    def _write(self, pod: dict, now: float) -> None:
        statuses = [{"name": container.get("name"), "image": container.get("image", ""), "imageID": "",
                     "ready": False, "started": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}}
                    for container in (pod.get("spec") or {}).get("containers") or []]
        status = pod_status_base(pod, now, False, self.kubelet.node_ip)
        status["conditions"][0]["status"] = "False"     # PodReadyToStartContainers: no sandbox
        status.update({"phase": "Pending", "containerStatuses": statuses})
        self.kubelet.client.patch("pods", pod, {"status": status}, subresource="status")
