"""Boot of one node twin, run as PID 1 of the node's new PID, mount and UTS namespaces.

``node.py`` starts ``unshare --mount --uts --pid --fork --propagation private python -m gpulab.nsinit REQ``
where REQ is ``nodes/<name>/boot-request.json``. This process sets the hostname, mounts the overlay of ``/``
(upper dir on the node's tmpfs), lets the NVIDIA layer decide the boot state, mounts the views (``/proc``,
``/sys``, ``/dev`` and the fake NVIDIA files) at their real paths, installs the fake ``reboot``/``shutdown``
and NVIDIA tools, chroots, starts ``sshd`` and reports one JSON line on stdout. It then execs a tiny reaper
that stays PID 1: killing it ends every process of the node and, with them, every mount of the namespace.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback

from gpulab.devviews import make_nvidia_dev_nodes, make_pci_devices
from gpulab.kubeadm import install_kubelet_files, start_kubelet_at_boot
from gpulab.layer import nvidia_function
from gpulab.osutil import host_pid, in_root, write_file, write_json
from gpulab.systemctl import CONTROL_DIR, install_systemctl, start_units_at_boot

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096

SSHD_DIR = "/run/sshd-gpulab"
REAPER_PATH = "/run/gpulab-init"

# PID 1 of the node once setup is done: reaps orphans; SIGTERM ends the node (kill(-1) = all of the namespace).
REAPER = r"""# PID 1 of a gpulab node twin (written at each boot by gpulab.nsinit)
import ctypes, os, signal, time
ctypes.CDLL(None).prctl(15, b"systemd", 0, 0, 0)  # PR_SET_NAME: /proc/1/comm reads as on a systemd host
def stop(*_):
    try:
        os.kill(-1, signal.SIGKILL)
    finally:
        os._exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(1)
    except InterruptedError:
        pass
"""

POWER_SCRIPT = r"""#!/bin/sh
# gpulab node twin: asks the lab to %(default)s this node (the lab daemon stops sshd and every process of
# the node, waits the boot delay and boots it again). Installed at each boot by gpulab.nsinit.
action=%(default)s
when=now
for arg in "$@"; do
    case "$arg" in
        -r|--reboot) action=reboot ;;
        -h|-H|-P|-p|--poweroff|--halt) action=poweroff ;;
        -c) echo "No scheduled shutdown to cancel (gpulab twin runs them immediately)."; exit 0 ;;
        -k) echo "Wall message only (gpulab twin)."; exit 0 ;;
        now|+*|[0-9]*) when="$arg" ;;
    esac
done
mkdir -p %(control)s
printf '{"action": "%%s", "when": "%%s", "program": "%%s"}\n' "$action" "$when" "$(basename "$0")" \
    > %(control)s/request.tmp && mv %(control)s/request.tmp %(control)s/request
echo "System is going down for $action."
exit 0
"""

FAKE_WRAPPER = """#!/bin/sh
# gpulab node twin: fake %(name)s from lab/gpulab/nvidia/bin/%(name)s (installed at each boot by gpulab.nsinit)
exec %(command)s "$@"
"""

_libc = ctypes.CDLL(None, use_errno=True)


def mount(source: str, target: str, fstype: str = None, flags: int = 0, data: str = None) -> None:
    result = _libc.mount(source.encode() if source else None, target.encode(),
                         fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                         data.encode() if data else None)
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "mount %s on %s (%s, %s): %s" % (source, target, fstype, data, os.strerror(errno)))


def bind(source: str, target: str, read_only: bool = False) -> None:
    mount(source, target, None, MS_BIND)
    if read_only:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def mount_overlay(req: dict) -> str:
    tmpfs = req["tmpfs_dir"]
    for sub in ("upper", "work"):
        os.makedirs(os.path.join(tmpfs, sub), exist_ok=True)
    merged = req["merged_dir"]
    mount("overlay", merged, "overlay", 0,
          "lowerdir=/,upperdir=%s/upper,workdir=%s/work" % (tmpfs, tmpfs))
    return merged


def call_nvidia(backend: str, dotted: str, **kwargs):
    """backend.<module>.<function>(...) of the NVIDIA layer."""
    return nvidia_function(backend, dotted)(**kwargs)


def has_efi(req: dict) -> bool:
    return req["efi"] is not None and bool(req["efi"].get("efi", True))


def compute_state(req: dict, merged: str) -> dict:
    backend = req["nvidia_backend"]
    if req.get("preinstall_driver"):
        call_nvidia(backend, "runfile.install_driver", root=merged, version=req["preinstall_driver"],
                    cache_dir=req["cache_dir"])
    return call_nvidia(backend, "boot.compute_boot_state", root=merged, hw=req["hw"], efi=req["efi"],
                       faults=req["faults"])


def generic_boot_messages(req: dict) -> list:
    """The first lines of every boot's kernel log (before the NVIDIA layer's own)."""
    release = os.uname().release
    messages = ["Linux version %s (gpulab node twin %s)" % (release, req["name"]),
                "Command line: BOOT_IMAGE=/boot/vmlinuz-%s root=/dev/vda ro quiet" % release]
    if has_efi(req):
        messages.append("secureboot: Secure boot %s" % ("enabled" if req["efi"].get("secure_boot") else "disabled"))
    return messages


def kernel_log_text(req: dict, state: dict, booted_at: float) -> str:
    """run/kmsg: ``# boot_epoch=``, then /dev/kmsg records: the generic boot lines and the NVIDIA layer's
    (``kmsg_records`` of compute_boot_state)."""
    generic = generic_boot_messages(req)
    lines = ["# boot_epoch=%.6f" % booted_at]
    lines += ["6,%d,%d,-;%s" % (seq, 500000 + seq * 13717, text) for seq, text in enumerate(generic)]
    for seq, record in enumerate(state["kmsg_records"], start=len(generic)):
        level, _old_seq, rest = record.split(",", 2)
        lines.append("%s,%d,%s" % (level, seq, rest))
    return "\n".join(lines) + "\n"


def publish_run_files(req: dict, state: dict) -> None:
    """The node's read-only /run/gpulab (host side: nodes/<name>/run/), rewritten at each boot."""
    run_dir = req["run_dir"]
    booted_at = time.time()
    with open(os.path.join(run_dir, "boot.json"), "w") as stream:
        json.dump({"boot_id": req["boot_id"], "booted_at": booted_at, "state": state, "faults": req["faults"]},
                  stream, indent=1, sort_keys=True)
    with open(os.path.join(run_dir, "modules.json"), "w") as stream:
        json.dump(state.get("modules") or [], stream, indent=1)
    with open(os.path.join(run_dir, "kmsg"), "w") as stream:
        stream.write(kernel_log_text(req, state, booted_at))
    with open(os.path.join(run_dir, "boot_id"), "w") as stream:
        stream.write(req["boot_id"] + "\n")
    if state.get("efi") is not None:
        # MokManager's result as the NVIDIA layer computed it: the NVRAM of the next boot
        write_json(os.path.join(req["firmware_dir"], "efi.json"), state["efi"])


def make_dev(merged: str, dev_nodes: list) -> None:
    dev = in_root(merged, "/dev")
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=1m")
    for name, major, minor, mode in (("null", 1, 3, 0o666), ("zero", 1, 5, 0o666), ("full", 1, 7, 0o666),
                                     ("random", 1, 8, 0o666), ("urandom", 1, 9, 0o666), ("tty", 5, 0, 0o666)):
        os.mknod(os.path.join(dev, name), mode | 0o020000, os.makedev(major, minor))
        os.chmod(os.path.join(dev, name), mode)
    for path, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
        os.symlink(target, os.path.join(dev, path))
    for sub in ("pts", "shm"):
        os.mkdir(os.path.join(dev, sub))
    mount("devpts", os.path.join(dev, "pts"), "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    mount("tmpfs", os.path.join(dev, "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    make_nvidia_dev_nodes(merged, dev_nodes)


def mount_views(req: dict, merged: str, state: dict) -> None:
    mount("proc", in_root(merged, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind(os.path.join(req["run_dir"], "boot_id"), in_root(merged, "/proc/sys/kernel/random/boot_id"), True)
    mount("tmpfs", in_root(merged, "/proc/driver"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=4m")
    mount("sysfs", in_root(merged, "/sys"), "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for view in ("/sys/module", "/sys/bus/pci/devices"):
        mount("tmpfs", in_root(merged, view), "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=4m")
    # sysfs has no efi/ here (the host boots without EFI) and no directory can be made in sysfs: the node gets
    # a /sys/firmware of its own, with efi/efivars only when its hardware profile has EFI.
    firmware_dir = in_root(merged, "/sys/firmware")
    mount("tmpfs", firmware_dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
    os.makedirs(os.path.join(firmware_dir, "acpi"))
    if has_efi(req):
        os.makedirs(os.path.join(firmware_dir, "efi", "efivars"))
    make_pci_devices(merged, state.get("pci_devices") or [])
    make_dev(merged, state.get("dev_nodes") or [])
    mount("tmpfs", in_root(merged, "/run"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64m")
    mount("tmpfs", in_root(merged, "/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g")
    for source, target, read_only in ((req["run_dir"], "/run/gpulab", True),
                                      (req["firmware_dir"], "/run/gpulab-firmware", False),
                                      (req["control_dir"], CONTROL_DIR, False),
                                      (req["lab_dir"], "/opt/gpulab/lib", True),
                                      (req["cache_dir"], "/opt/gpulab/cache", True)):
        os.makedirs(in_root(merged, target), exist_ok=True)
        bind(source, in_root(merged, target), read_only)
    os.makedirs(in_root(merged, "/run/sshd"), mode=0o755, exist_ok=True)
    for path, text in sorted((state.get("files") or {}).items()):
        write_file(in_root(merged, path), text)


def write_identity(req: dict, merged: str) -> None:
    """hostname, /etc/hosts and a machine-id of its own, on the node's disk as on a real host."""
    write_file(in_root(merged, "/etc/hostname"), req["name"] + "\n")
    write_file(in_root(merged, "/etc/hosts"),
               "127.0.0.1\tlocalhost\n%s\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n" % (req["ip"], req["name"]))
    write_file(in_root(merged, "/etc/machine-id"), req["machine_id"] + "\n", 0o444)


def install_power_commands(merged: str) -> None:
    for name, default in (("reboot", "reboot"), ("shutdown", "poweroff"), ("poweroff", "poweroff"),
                          ("halt", "poweroff")):
        write_file(in_root(merged, "/usr/sbin/" + name),
                   POWER_SCRIPT % {"default": default, "control": CONTROL_DIR}, 0o755)


def fake_binary_targets(req: dict, merged: str, name: str) -> list:
    explicit = (req.get("fake_binary_paths") or {}).get(name)
    if explicit:
        return list(explicit)
    if os.path.lexists(in_root(merged, "/usr/sbin/" + name)):
        return ["/usr/sbin/" + name]
    return ["/usr/bin/" + name]


def install_fake_binaries(req: dict, merged: str) -> None:
    bin_dir = os.path.join(req["lab_dir"], "gpulab", "nvidia", "bin")
    if not os.path.isdir(bin_dir):
        return
    for name in sorted(os.listdir(bin_dir)):
        source = os.path.join(bin_dir, name)
        if not os.path.isfile(source) or name.startswith((".", "_")) or name.endswith((".py", ".pyc", ".md")):
            continue
        with open(source, "rb") as stream:
            first_line = stream.readline()
        in_node = "/opt/gpulab/lib/gpulab/nvidia/bin/" + name
        if first_line.startswith(b"#!") and b"python" not in first_line:
            command = in_node
        else:
            command = "env PYTHONPATH=/opt/gpulab/lib /usr/bin/python3 " + in_node
        for target in fake_binary_targets(req, merged, name):
            write_file(in_root(merged, target), FAKE_WRAPPER % {"name": name, "command": command}, 0o755)


def sshd_config_text(req: dict) -> str:
    return "\n".join([
        "# gpulab node twin %s: sshd of this node (written at each boot by gpulab.nsinit)" % req["name"],
        "ListenAddress %s:22" % req["ip"],
        "HostKey %s/ssh_host_ed25519_key" % SSHD_DIR,
        "AuthorizedKeysFile %s/authorized_keys .ssh/authorized_keys" % SSHD_DIR,
        "PidFile %s/sshd.pid" % SSHD_DIR,
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "AcceptEnv LANG LC_*",
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        "Subsystem sftp internal-sftp",
        ""])


def prepare_sshd(req: dict, merged: str) -> None:
    sshd_dir = in_root(merged, SSHD_DIR)
    os.makedirs(sshd_dir, mode=0o700, exist_ok=True)
    shutil.copyfile(req["host_key"], os.path.join(sshd_dir, "ssh_host_ed25519_key"))
    os.chmod(os.path.join(sshd_dir, "ssh_host_ed25519_key"), 0o600)
    shutil.copyfile(req["host_key"] + ".pub", os.path.join(sshd_dir, "ssh_host_ed25519_key.pub"))
    write_file(os.path.join(sshd_dir, "authorized_keys"), req["authorized_key"] + "\n", 0o600)
    write_file(os.path.join(sshd_dir, "sshd_config"), sshd_config_text(req), 0o600)


def install_reaper(merged: str) -> None:
    write_file(in_root(merged, REAPER_PATH), REAPER, 0o755)


def start_sshd() -> None:
    """Daemonized sshd (its parent exits once the listen socket is bound); it becomes a child of PID 1."""
    subprocess.run(["/usr/sbin/sshd", "-f", SSHD_DIR + "/sshd_config", "-E", SSHD_DIR + "/sshd.log"],
                   check=True, stdin=subprocess.DEVNULL)


def log(message: str) -> None:
    sys.stderr.write("%s nsinit: %s\n" % (time.strftime("%H:%M:%S"), message))
    sys.stderr.flush()


def boot(req: dict) -> dict:
    started = time.monotonic()
    pid = host_pid()
    socket.sethostname(req["name"])
    merged = mount_overlay(req)
    state = compute_state(req, merged)
    publish_run_files(req, state)
    mount_views(req, merged, state)
    if os.path.exists(in_root(merged, "/usr/local/nvidia/toolkit/.gpulab-toolkit-operand")):
        # the GPU Operator's toolkit operand installed on this disk (`up --gpu-operator`): its /run/nvidia state
        call_nvidia(req["nvidia_backend"], "toolkitoperand.install_run", root=merged)
    write_identity(req, merged)
    install_power_commands(merged)
    install_systemctl(merged)
    install_kubelet_files(merged, req["name"], req.get("cluster_name") or "kubernetes",
                          req.get("kube_api_url") or "https://127.0.0.1:6443")
    install_fake_binaries(req, merged)
    prepare_sshd(req, merged)
    install_reaper(merged)
    os.chroot(merged)
    os.chdir("/")
    start_units_at_boot(log)
    start_kubelet_at_boot(log)
    if req["start_sshd"]:
        start_sshd()
    return {"ok": True, "host_pid": pid, "setup_s": round(time.monotonic() - started, 3),
            "module_loaded": bool(state.get("module_loaded")),
            "kernel_driver_version": state.get("kernel_driver_version")}


def main(argv: list) -> int:
    with open(argv[1]) as stream:
        req = json.load(stream)
    try:
        result = boot(req)
    except Exception as error:
        log(traceback.format_exc())
        sys.stdout.write(json.dumps({"ok": False, "error": "%s: %s" % (type(error).__name__, error)}) + "\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.execv("/usr/bin/python3", ["/usr/bin/python3", "-S", REAPER_PATH])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
