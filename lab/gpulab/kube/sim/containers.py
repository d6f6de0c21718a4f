"""The container processes one kubelet runs in its node twin: a container's command (`command` + `args`)
started as a process in the node's namespaces (`NodeView.start_process`), its output streamed into the pod
log, its exit code kept for the kubelet, and SIGTERM/SIGKILL of its whole process group when the pod goes.

With `pid1_signals` a container's process is treated as the PID 1 of its container: SIGTERM reaches it only
when it catches SIGTERM (`SigCgt` in /proc/PID/status), as the kernel delivers to a PID namespace's init only
the signals it handles; otherwise it lives out the grace period until SIGKILL (a pod running `sleep 600` takes
its 30 s to go, as on a real node).

A NodeView without `start_process` (api-only nodes, test views that do not run processes) runs nothing
here: the kubelet keeps its long-running stand-in for those pods.
"""
from __future__ import annotations

import os
import signal
import threading

LOG_LIMIT_BYTES = 1 << 20     # a container log keeps its last MiB (the kubelet rotates at 10 MiB)


class ContainerProcesses:
    """Processes of pod containers, by pod uid. `wake()` is called when one exits."""

    def __init__(self, view, logs, wake, max_processes: int = 64, pid1_signals: bool = False):
        self._view = view
        self.pid1_signals = pid1_signals
        self._logs = logs
        self._wake = wake
        self.max_processes = max_processes
        self._lock = threading.Lock()
        self._processes = {}      # uid -> {"process": Popen, "exit_code": int|None}
        self.missing_program = set()   # uids of pods whose program the node lacks: the kubelet's stand-in runs them

    def runs(self, pod: dict) -> bool:
        """Whether the pod's container runs (or is to run) as a process here."""
        return (pod.get("metadata") or {}).get("uid") not in self.missing_program and self.available() \
            and container_argv(pod) is not None

    def available(self) -> bool:
        return callable(getattr(self._view, "start_process", None))

    def start(self, uid: str, namespace: str, name: str, argv: list, env: dict, container=None):
        """True when started; False when the node has no such program; None when at the process bound
        (or the node cannot start processes now): the caller tries again later. `container`: the log is that
        container's of a pod of several (`uid` then names the container's process, `multicontainer.py`)."""
        with self._lock:
            if sum(1 for entry in self._processes.values() if entry["exit_code"] is None) >= self.max_processes:
                return None
        try:
            process = self._view.start_process(list(argv), env=dict(env))
        except OSError:
            return None
        if process is None:
            return False
        entry = {"process": process, "exit_code": None}
        with self._lock:
            self._processes[uid] = entry
        threading.Thread(target=self._follow, args=(entry, namespace, name, container), daemon=True,
                         name="gpulab-container-%s" % name).start()
        return True

    def _follow(self, entry: dict, namespace: str, name: str, container=None) -> None:
        process = entry["process"]
        written = 0
        for chunk in iter(lambda: process.stdout.read1(65536), b""):
            if written < LOG_LIMIT_BYTES:
                text = chunk[:LOG_LIMIT_BYTES - written].decode("utf-8", "replace")
                written += len(chunk)
                self._logs.append(namespace, name, text, container)
        process.stdout.close()
        code = process.wait()
        entry["exit_code"] = 128 - code if code < 0 else code    # killed by signal N: 128 + N, as a runtime says
        self._wake()

    def running(self, uid: str) -> bool:
        with self._lock:
            entry = self._processes.get(uid)
        return entry is not None and entry["exit_code"] is None

    def exit_code(self, uid: str):
        """The exit code of the pod's process once it has exited and its output is read, else None."""
        with self._lock:
            entry = self._processes.get(uid)
        return None if entry is None else entry["exit_code"]

    def signal(self, uid: str, signum: int) -> None:
        with self._lock:
            entry = self._processes.get(uid)
        if entry is None or entry["exit_code"] is not None:
            return
        try:
            os.killpg(entry["process"].pid, signum)   # the process group: a shell's children go too
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self, uid: str) -> None:
        if self.pid1_signals:
            with self._lock:
                entry = self._processes.get(uid)
            if entry is None or not catches_signal(entry["process"].pid, signal.SIGTERM):
                return    # a container's PID 1 without a handler: the kernel drops the signal
        self.signal(uid, signal.SIGTERM)

    def kill(self, uid: str) -> None:
        self.signal(uid, signal.SIGKILL)

    def forget(self, uid: str) -> None:
        self.kill(uid)
        with self._lock:
            self._processes.pop(uid, None)

    def uids(self) -> list:
        with self._lock:
            return list(self._processes)

    def kill_all(self) -> None:
        for uid in self.uids():
            self.forget(uid)


def catches_signal(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its ``SigCgt`` mask); False when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as stream:
            for line in stream:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def container_argv(pod: dict):
    """`command` + `args` of a single-container pod, or None (no command given: the image's entrypoint,
    which the twin does not have, so the kubelet keeps the container running until the pod goes)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) != 1:
        return None
    argv = [str(word) for word in list(containers[0].get("command") or []) + list(containers[0].get("args") or [])]
    return argv or None


def container_env(pod: dict) -> dict:
    """The container's literal `env` values (valueFrom is not resolved by the twin)."""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    return {item["name"]: str(item.get("value", "")) for item in container.get("env") or []
            if isinstance(item, dict) and item.get("name") and "valueFrom" not in item}
