"""What a node twin's containerd makes of a pod sandbox (``python -m gpulab.containerdcri [HANDLER]``, run inside
the node): nothing printed when containerd would create it, else containerd's CRI error as the kubelet shows it in
its ``FailedCreatePodSandBox`` event.

The twin's pods are no containerd tasks, so this reads what would stop real ones: the ``containerd`` unit not
running (its socket refuses: a drop-in it could not load killed it at its restart), a configuration whose default
runtime has no entry (containerd 1.x then runs without its CRI plugin), the pod's RuntimeClass handler absent from
the configuration, or the handler's (else ``default_runtime_name``'s) ``options.BinaryName`` not an
executable on the node. The configuration is what ``containerd config dump`` of the
unit's config file shows now (the twin does not keep what the running daemon loaded: a change without a restart
counts at once). Nodes whose ``containerd`` unit was never started with the node's ``systemctl`` (or was stopped)
are not judged: the twin runs their pods without containerd, as it always did.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

# gpulab.systemctl's record of the units started and not stopped (a leaf cannot import it: same path)
SYSTEMD_STARTED = "/var/lib/gpulab-systemd/started"
UNIT = "containerd.service"
SOCKET = "/run/containerd/containerd.sock"
CRI_PLUGINS = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri")
DUMP_TIMEOUT_S = 20


def judged(started_text: str) -> bool:
    """Whether a node whose systemctl recorded ``started_text`` runs its pods through containerd."""
    return UNIT in started_text.split()


def runtime_down_error() -> str:
    return ('rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial '
            'unix %s: connect: connection refused"' % SOCKET)


def cri_plugin_not_loaded_error() -> str:
    return "rpc error: code = Unimplemented desc = unknown service runtime.v1.RuntimeService"


def sandbox_error(dump: dict, handler, executable) -> str | None:
    """containerd's error creating a sandbox for ``handler`` (None: the default runtime) under the dumped
    configuration ``dump`` (parsed TOML); ``executable(name)`` says whether a program exists. None: no error."""
    plugins = dump.get("plugins") or {}
    cri = next((plugins[name] for name in CRI_PLUGINS if isinstance(plugins.get(name), dict)), {})
    table = cri.get("containerd") or {}
    runtimes = table.get("runtimes") or {}
    default = table.get("default_runtime_name") or "runc"
    if not isinstance(runtimes.get(default), dict):
        # A real containerd 1.6 whose configuration lacks the default runtime does not load its CRI plugin at all
        # ("invalid plugin config: no corresponding runtime configured in `containerd.runtimes` for `containerd`
        # `default_runtime_name = "runc"`", recorded in tests/unit/fixtures/containerd/): the kubelet's CRI calls
        # find no such service on the socket.
        return cri_plugin_not_loaded_error()
    name = handler or default
    runtime = runtimes.get(name)
    if not isinstance(runtime, dict):
        return ('rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "%s" is configured'
                % name)
    binary = (runtime.get("options") or {}).get("BinaryName") or "runc"
    if executable(binary):
        return None
    return ('rpc error: code = Unknown desc = failed to create containerd task: failed to create shim task: OCI '
            'runtime create failed: unable to retrieve OCI runtime error (open /run/containerd/io.containerd.runtime.'
            'v2.task/k8s.io/sandbox/log.json: no such file or directory): exec: "%s": stat %s: no such file or '
            'directory: unknown' % (binary, binary))


def _executable(program: str) -> bool:
    if "/" in program:
        return os.path.isfile(program) and os.access(program, os.X_OK)
    return shutil.which(program) is not None


def main(argv: list) -> int:
    try:
        with open(SYSTEMD_STARTED) as stream:
            if not judged(stream.read()):
                return 0
    except FileNotFoundError:
        return 0
    active = subprocess.run(["systemctl", "is-active", "containerd"], capture_output=True, text=True)
    if active.stdout.strip() != "active":
        print(runtime_down_error())
        return 0
    dump = subprocess.run(["containerd", "config", "dump"], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    if dump.returncode != 0:
        print(runtime_down_error())
        return 0
    import tomllib  # Python 3.11, the node's /usr/bin/python3 (Debian 12)
    error = sandbox_error(tomllib.loads(dump.stdout), argv[0] if argv else None, _executable)
    if error:
        print(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
