"""What the runner reads from the inventory before a run (with ansible-runner's own inventory API, so any source
ansible accepts works: a file, a directory, an inventory script or plugin config, `host1,host2,`): the hosts and
the one cluster they all belong to."""

from __future__ import annotations

import json
import tempfile

from gpuops_runner import approval

CLUSTER_VAR = "gpuops_cluster_name"
POLICY_VAR = "gpuops_approval_policy"
# ansible's implicit localhost names: the controller, never a node of some cluster
CONTROLLER_NAMES = ("localhost", "127.0.0.1", "::1")


class InventoryError(Exception):
    pass


def read_inventory(source, envvars, vault_password_file=None):
    """``ansible-inventory --list`` of ``source`` as a dict, through ansible_runner.get_inventory (vaulted values
    stay encrypted). Its artifacts go to a temporary folder that is removed."""
    import ansible_runner

    with tempfile.TemporaryDirectory(prefix="gpuops-inventory-") as private_dir:
        try:
            listing, error = ansible_runner.get_inventory(
                "list", [source], response_format="json", vault_password_file=vault_password_file,
                private_data_dir=private_dir, envvars=envvars, quiet=True, suppress_env_files=True)
        except Exception as failure:  # pylint: disable=broad-exception-caught  # ansible-runner raises several kinds
            raise InventoryError("the inventory %s cannot be read: %s" % (source, failure))
    if not isinstance(listing, dict):
        raise InventoryError("the inventory %s cannot be read: %s" % (source, (error or "no output").strip()[-500:]))
    return listing


def all_hosts(listing):
    """Every host of the inventory (of all groups), sorted."""
    hosts = set(((listing.get("_meta") or {}).get("hostvars") or {}))
    for name, entry in listing.items():
        if name != "_meta" and isinstance(entry, dict):
            hosts.update(entry.get("hosts") or [])
    return sorted(hosts)


def nodes(listing):
    """The hosts a runbook could touch through SSH: all but the controller's own names."""
    return [host for host in all_hosts(listing) if host not in CONTROLLER_NAMES]


def the_cluster(listing):
    """The one gpuops_cluster_name every node of the inventory carries; InventoryError naming the hosts otherwise
    (none, a value that is not a name, several clusters)."""
    hostvars = (listing.get("_meta") or {}).get("hostvars") or {}
    hosts = nodes(listing)
    if not hosts:
        raise InventoryError("the inventory has no hosts")
    by_name, missing, malformed = {}, [], []
    for host in hosts:
        value = (hostvars.get(host) or {}).get(CLUSTER_VAR)
        if value is None:
            missing.append(host)
        elif not isinstance(value, str) or not value.strip():
            malformed.append("%s (%s)" % (host, type(value).__name__ if not isinstance(value, str) else "empty"))
        else:
            by_name.setdefault(value, []).append(host)
    if malformed:
        raise InventoryError("%s must be a cluster name (text) on every host; not on %s"
                             % (CLUSTER_VAR, _few(malformed)))
    if missing:
        raise InventoryError("every host must carry %s (one inventory, one cluster); missing on %s"
                             % (CLUSTER_VAR, _few(missing)))
    if len(by_name) > 1:
        raise InventoryError("the inventory's hosts belong to several clusters (%s): one inventory, one cluster"
                             % "; ".join("%s: %s" % (name, _few(members)) for name, members in sorted(by_name.items())))
    return next(iter(by_name))


def approval_policy(listing, change_kind, engine_kinds=None):
    """The change kind's two-person policy: the inventory's gpuops_approval_policy (one value on every node) over
    the risk table's defaults (``engine_kinds``: the change engine's kinds, approval.default_policy).
    InventoryError when the nodes disagree or the value is malformed."""
    hostvars = (listing.get("_meta") or {}).get("hostvars") or {}
    values = {approval.canonical((hostvars.get(host) or {}).get(POLICY_VAR)) for host in nodes(listing)}
    if len(values) > 1:
        raise InventoryError("%s differs between the inventory's hosts: set it once for the cluster" % POLICY_VAR)
    value = json.loads(values.pop()) if values else None
    if value is not None and not (isinstance(value, dict) and all(isinstance(rule, dict) or rule is None
                                                                  for rule in value.values())):
        raise InventoryError("%s must map change kinds to rules (require_approval, allowed_signers, ttl_hours)"
                             % POLICY_VAR)
    try:
        return approval.policy_for(change_kind, value, engine_kinds)
    except (TypeError, ValueError) as error:
        raise InventoryError("%s: %s" % (POLICY_VAR, error))


def _few(names, shown=5):
    return ", ".join(names[:shown]) + (" and %d more" % (len(names) - shown) if len(names) > shown else "")
