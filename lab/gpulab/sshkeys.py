"""SSH keys of a lab: one client key for the operator/Ansible, one host key per node, a known_hosts file."""
from __future__ import annotations

import os
import subprocess


def generate_key(path: str, comment: str) -> None:
    """An ed25519 key pair at ``path`` / ``path.pub`` (kept if it already exists: host keys survive reboots)."""
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def client_key_path(keys_dir: str) -> str:
    return os.path.join(keys_dir, "id_ed25519")


def host_key_path(keys_dir: str, node_name: str) -> str:
    return os.path.join(keys_dir, "hosts", node_name, "ssh_host_ed25519_key")


def public_key(path: str) -> str:
    with open(path + ".pub") as stream:
        return stream.read().strip()


def write_known_hosts(keys_dir: str, nodes: list) -> str:
    """known_hosts with every node under its name and its address; nodes: [{name, ip}]."""
    path = os.path.join(keys_dir, "known_hosts")
    lines = []
    for node in nodes:
        key_type, key_b64 = public_key(host_key_path(keys_dir, node["name"])).split()[:2]
        lines.append("%s,%s %s %s\n" % (node["name"], node["ip"], key_type, key_b64))
    with open(path, "w") as stream:
        stream.writelines(lines)
    return path
