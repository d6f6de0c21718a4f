"""What the runner reads from the inventory before a run: the cluster name to confirm, the target hosts."""

from __future__ import annotations

import json
import subprocess

CLUSTER_VAR = "gpuops_cluster_name"


class InventoryError(Exception):
    pass


def read_inventory(inventory, env, vault_password_file=None, timeout_s=120):
    """`ansible-inventory --list` as JSON (vaulted values stay encrypted)."""
    argv = ["ansible-inventory", "-i", inventory, "--list"]
    if vault_password_file:
        argv += ["--vault-password-file", vault_password_file]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InventoryError("ansible-inventory failed: %s" % error)
    if done.returncode != 0:
        raise InventoryError("ansible-inventory -i %s failed: %s" % (inventory, done.stderr.strip()[-500:]))
    return json.loads(done.stdout)


def group_hosts(listing, group):
    """The hosts of a group and its children, sorted."""
    hosts, pending, seen = set(), [group], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        entry = listing.get(name) or {}
        hosts.update(entry.get("hosts") or [])
        pending.extend(entry.get("children") or [])
    return sorted(hosts)


def cluster_names(listing, hosts):
    """The distinct gpuops_cluster_name values of those hosts (a host without one counts as None)."""
    hostvars = (listing.get("_meta") or {}).get("hostvars") or {}
    return sorted({hostvars.get(host, {}).get(CLUSTER_VAR) for host in hosts}, key=str)
