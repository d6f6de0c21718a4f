"""``DIR/inventory.yml`` and ``DIR/ssh_config``: how Ansible and an operator reach the node twins."""
from __future__ import annotations

import json
import os

from gpulab import sshkeys

# Ansible's default ssh_args with a short ControlPersist: masters of a stopped lab must not linger.
ANSIBLE_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=30s"
# A unix socket path is limited to 107 bytes. ssh's ControlPath is the control dir, "/", the 40-character hash %C,
# and while the master starts, a ".XXXXXXXXXXXXXXXX" suffix (17 characters) on the socket it binds first: a longer
# dir makes every scp/ssh of the lab fail with "Connection closed" (seen under pytest-xdist, whose tmp paths are
# longer), so such labs go without ControlMaster.
MAX_CONTROL_DIR_LEN = 107 - 1 - 40 - 17


def _yaml_scalar(value) -> str:
    """A YAML scalar for a str/bool/int; JSON strings are valid YAML double-quoted scalars."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def inventory_text(state_dir: str, cluster_name: str, nodes: list, extra_vars: dict | None = None,
                   bastion: dict | None = None) -> str:
    keys_dir = os.path.join(state_dir, "keys")
    host_vars = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": sshkeys.client_key_path(keys_dir),
        "ansible_ssh_common_args": "-F %s" % os.path.join(state_dir, "ssh_config"),
        "ansible_ssh_args": ANSIBLE_SSH_ARGS,
        "ansible_ssh_pipelining": True,
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    lines = ["# Written by `gpulab up` for the fleet twin in %s; removed by `gpulab down`." % state_dir]
    if bastion:
        lines.append("# The GPU nodes answer SSH only through the bastion %s (%s@%s): ProxyJump in ssh_config."
                     % (bastion["name"], bastion["user"], bastion["ip"]))
    lines += ["all:", "  vars:",
             "    gpuops_cluster_name: %s" % _yaml_scalar(cluster_name),
             "    gpuops_kubeconfig: %s" % _yaml_scalar(os.path.join(state_dir, "kubeconfig"))]
    lines += ["    %s: %s" % (key, _yaml_scalar(value)) for key, value in sorted((extra_vars or {}).items())]
    lines += ["  children:", "    gpu_nodes:", "      hosts:"]
    for node in nodes:
        lines.append("        %s:" % node["name"])
        lines.append("          ansible_host: %s" % _yaml_scalar(node["ip"]))
    lines.append("      vars:")
    for key, value in host_vars.items():
        lines.append("        %s: %s" % (key, _yaml_scalar(value)))
    return "\n".join(lines) + "\n"


def ssh_config_text(state_dir: str, nodes: list, bastion: dict | None = None) -> str:
    """With ``bastion`` ({name, ip, user}: ``up --bastion``) every node is reached through it (ProxyJump), as the
    only way in."""
    keys_dir = os.path.join(state_dir, "keys")
    control_dir = os.path.join(state_dir, "cm")
    lines = ["# Written by `gpulab up`: ssh -F %s <node>" % os.path.join(state_dir, "ssh_config")]
    if bastion:
        lines += ["Host %s %s" % (bastion["name"], bastion["ip"]),
                  "  HostName %s" % bastion["ip"],
                  "  User %s" % bastion["user"],
                  "  ForwardAgent no"]
    for node in nodes:
        lines += ["Host %s %s" % (node["name"], node["ip"]),
                  "  HostName %s" % node["ip"]]
        if bastion:
            lines += ["  ProxyJump %s" % bastion["name"]]
    lines += ["",
              "Host *",
              "  User root",
              "  IdentityFile %s" % sshkeys.client_key_path(keys_dir),
              "  IdentitiesOnly yes",
              "  UserKnownHostsFile %s" % os.path.join(keys_dir, "known_hosts"),
              "  StrictHostKeyChecking yes",
              "  GlobalKnownHostsFile /dev/null",
              "  ConnectTimeout 5",
              "  LogLevel ERROR",
              "  BatchMode yes"]
    if len(control_dir) <= MAX_CONTROL_DIR_LEN:
        lines += ["  ControlMaster auto",
                  "  ControlPath %s/%%C" % control_dir,
                  "  ControlPersist 30s"]
    return "\n".join(lines) + "\n"


def write_access_files(state_dir: str, cluster_name: str, nodes: list, extra_vars: dict | None = None,
                       bastion: dict | None = None) -> dict:
    """Write inventory.yml (with `extra_vars` for all hosts), ssh_config and keys/known_hosts (the bastion's key
    too, with ``bastion``); returns their paths."""
    os.makedirs(os.path.join(state_dir, "cm"), mode=0o700, exist_ok=True)
    sshkeys.write_known_hosts(os.path.join(state_dir, "keys"), nodes + ([bastion] if bastion else []))
    paths = {"inventory": os.path.join(state_dir, "inventory.yml"),
             "ssh_config": os.path.join(state_dir, "ssh_config")}
    with open(paths["inventory"], "w") as stream:
        stream.write(inventory_text(state_dir, cluster_name, nodes, extra_vars, bastion))
    with open(paths["ssh_config"], "w") as stream:
        stream.write(ssh_config_text(state_dir, nodes, bastion))
    return paths
