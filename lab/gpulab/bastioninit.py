"""The bastion of ``up --bastion``, run as PID 1 of its own PID, mount and UTS namespaces inside the fleet network.

``bastion.py`` starts ``nsenter --net=FLEET unshare --mount --uts --pid --fork --propagation private python -m
gpulab.bastioninit REQ``. The bastion is a jump host and nothing else: the host's filesystem as it is, a login
user of its own (``gpuops``, added to a private copy of ``/etc/passwd`` bind-mounted over the host's), an empty
``/home`` and ``/run``, and an sshd that lets that user open TCP channels to the nodes' sshd only (``PermitOpen``)
and refuses root. It reports one JSON line on stdout, then stays as the reaper: killing it ends the bastion.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

from gpulab.osutil import host_pid, write_file

CONFIG_DIR = "/run/gpulab-bastion"
FIRST_UID = 2900


def mount(*args: str) -> None:
    subprocess.run(["mount"] + list(args), check=True, stdin=subprocess.DEVNULL)


def free_id(path: str, first: int) -> int:
    """The first uid/gid from ``first`` on that the host's passwd/group file does not use."""
    with open(path) as stream:
        used = {int(line.split(":")[2]) for line in stream if line.count(":") >= 3}
    candidate = first
    while candidate in used:
        candidate += 1
    return candidate


def add_login_user(user: str) -> int:
    """``user`` in private copies of /etc/passwd and /etc/group (bind-mounted read-only over the host's)."""
    uid = max(free_id("/etc/passwd", FIRST_UID), free_id("/etc/group", FIRST_UID))
    for name, line in (("passwd", "%s:x:%d:%d:gpulab bastion login:/home/%s:/bin/bash\n" % (user, uid, uid, user)),
                       ("group", "%s:x:%d:\n" % (user, uid))):
        copy = os.path.join(CONFIG_DIR, name)
        shutil.copyfile("/etc/" + name, copy)
        with open(copy, "a") as stream:
            stream.write(line)
        os.chmod(copy, 0o644)
        mount("--bind", copy, "/etc/" + name)
        mount("-o", "remount,bind,ro", "/etc/" + name)
    home = "/home/" + user
    os.makedirs(home, mode=0o750)
    os.chown(home, uid, uid)
    return uid


def sshd_config_text(req: dict) -> str:
    return "\n".join([
        "# gpulab bastion: a jump host to the GPU nodes (written at each boot by gpulab.bastioninit)",
        "ListenAddress %s:22" % req["ip"],
        "HostKey %s/ssh_host_ed25519_key" % CONFIG_DIR,
        "AuthorizedKeysFile %s/authorized_keys" % CONFIG_DIR,
        "PidFile %s/sshd.pid" % CONFIG_DIR,
        "AllowUsers %s" % req["user"],
        "PermitRootLogin no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "AllowTcpForwarding local",
        "PermitOpen %s" % " ".join("%s:22" % ip for ip in req["node_ips"]),
        "AllowAgentForwarding no",
        "AllowStreamLocalForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "GatewayPorts no",
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        ""])


def boot(req: dict) -> dict:
    pid = host_pid()
    socket.sethostname(req["name"])
    mount("-t", "proc", "-o", "nosuid,nodev,noexec", "proc", "/proc")
    for target, mode in (("/run", "755"), ("/home", "755")):
        mount("-t", "tmpfs", "-o", "mode=%s,size=16m,nosuid,nodev" % mode, "gpulab-bastion", target)
    os.makedirs("/run/sshd", mode=0o755)
    os.makedirs(CONFIG_DIR, mode=0o755)
    uid = add_login_user(req["user"])
    key = os.path.join(CONFIG_DIR, "ssh_host_ed25519_key")
    shutil.copyfile(req["host_key"], key)
    os.chmod(key, 0o600)
    write_file(os.path.join(CONFIG_DIR, "authorized_keys"), req["authorized_key"] + "\n", 0o644)
    write_file(os.path.join(CONFIG_DIR, "sshd_config"), sshd_config_text(req), 0o600)
    subprocess.run(["/usr/sbin/sshd", "-f", CONFIG_DIR + "/sshd_config", "-E", CONFIG_DIR + "/sshd.log"], check=True,
                   stdin=subprocess.DEVNULL)
    return {"ok": True, "host_pid": pid, "uid": uid}


def reap_forever() -> None:
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


def main(argv: list) -> int:
    with open(argv[1]) as stream:
        req = json.load(stream)
    try:
        result = boot(req)
    except Exception as error:
        sys.stderr.write(traceback.format_exc())
        sys.stdout.write(json.dumps({"ok": False, "error": "%s: %s" % (type(error).__name__, error)}) + "\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    reap_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
