"""k3s and RKE2 on a node twin (`gpulab up --rancher k3s|k3s-agent|rke2-server|rke2-agent`): the files their
installers leave on a node, written on the node's disk (the overlay's upper dir) before its first boot.

- the unit of the install: k3s's script writes `/etc/systemd/system/k3s.service` (server) or `k3s-agent.service`;
  RKE2's tarball install puts `rke2-server.service` / `rke2-agent.service` in `/usr/local/lib/systemd/system`;
  the unit is marked started, so the node's systemctl runs it at every boot, as an enabled unit;
- the program the unit runs, `/usr/local/bin/k3s` or `/usr/local/bin/rke2`: the twin's stand-in
  (`gpulab.rancheragent`) that does what their agent does with containerd: it renders
  `<data dir>/agent/etc/containerd/config.toml` at every start (from `config-v3.toml.tmpl` / `config.toml.tmpl` when
  the user wrote one, `{{ template "base" . }}` standing for the stock config) and runs the node's containerd with
  it on `/run/k3s/containerd/containerd.sock`;
- the embedded containerd where the role looks for it: k3s `<data dir>/data/current/bin/containerd`, RKE2
  `<data dir>/bin/containerd` (links to the node's own containerd, `up --containerd` decides which release).
"""
from __future__ import annotations

import os

RANCHER_CHOICES = ("k3s", "k3s-agent", "rke2-server", "rke2-agent")
# choice -> (flavor, role of the node, unit, unit directory, program)
LAYOUTS = {
    "k3s": ("k3s", "server", "k3s.service", "/etc/systemd/system", "/usr/local/bin/k3s"),
    "k3s-agent": ("k3s", "agent", "k3s-agent.service", "/etc/systemd/system", "/usr/local/bin/k3s"),
    "rke2-server": ("rke2", "server", "rke2-server.service", "/usr/local/lib/systemd/system", "/usr/local/bin/rke2"),
    "rke2-agent": ("rke2", "agent", "rke2-agent.service", "/usr/local/lib/systemd/system", "/usr/local/bin/rke2"),
}
STARTED_LIST = "/var/lib/gpulab-systemd/started"   # gpulab.systemctl's list of units run at boot

UNIT = """[Unit]
Description=%(title)s
Documentation=%(docs)s
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
KillMode=process
Delegate=yes
Restart=always
RestartSec=5s
ExecStart=%(program)s %(role)s
"""

PROGRAM = """#!/bin/sh
# gpulab node twin: %(flavor)s stand-in (lab/gpulab/rancheragent.py): renders containerd's config as %(flavor)s does
# and runs the node's containerd with it
exec env PYTHONPATH=/opt/gpulab/lib /usr/bin/python3 -m gpulab.rancheragent %(flavor)s "$@"
"""


def fleet_rancher(choices: list, count: int) -> list:
    """The k3s/RKE2 layout of each of `count` nodes: `choices` in turn; None everywhere without `--rancher`."""
    unknown = [choice for choice in choices or [] if choice not in LAYOUTS]
    if unknown:
        raise ValueError("unknown --rancher %s (known: %s)" % (", ".join(unknown), ", ".join(RANCHER_CHOICES)))
    if not choices:
        return [None] * count
    return [choices[index % len(choices)] for index in range(count)]


def _write(upper_dir: str, path: str, text: str, mode: int = 0o644) -> None:
    target = os.path.join(upper_dir, path.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.chmod(target, mode)


def _link(upper_dir: str, path: str, target: str) -> None:
    link = os.path.join(upper_dir, path.lstrip("/"))
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def write_layout(upper_dir: str, choice: str) -> dict:
    """The install of ``choice`` on a new node's disk; returns {flavor, service, data_dir}."""
    flavor, role, unit, unit_dir, program = LAYOUTS[choice]
    data_dir = "/var/lib/rancher/" + flavor
    title = "Lightweight Kubernetes" if flavor == "k3s" else "Rancher Kubernetes Engine v2 (%s)" % role
    docs = "https://k3s.io" if flavor == "k3s" else "https://github.com/rancher/rke2#readme"
    _write(upper_dir, os.path.join(unit_dir, unit),
           UNIT % {"title": title, "docs": docs, "program": program, "role": role})
    _write(upper_dir, program, PROGRAM % {"flavor": flavor}, 0o755)
    embedded = "data/current/bin/containerd" if flavor == "k3s" else "bin/containerd"
    _link(upper_dir, os.path.join(data_dir, embedded), "/usr/bin/containerd")
    for sub in ("agent/etc/containerd", "agent/containerd", "agent/etc/cni/net.d"):
        os.makedirs(os.path.join(upper_dir, data_dir.lstrip("/"), sub), exist_ok=True)
    os.makedirs(os.path.join(upper_dir, "etc/rancher", flavor), exist_ok=True)
    started = os.path.join(upper_dir, STARTED_LIST.lstrip("/"))
    units = set()
    if os.path.exists(started):
        with open(started, encoding="utf-8") as stream:
            units = {line.strip() for line in stream if line.strip()}
    _write(upper_dir, STARTED_LIST, "".join(name + "\n" for name in sorted(units | {unit})))
    return {"flavor": flavor, "service": unit[:-len(".service")], "data_dir": data_dir}
