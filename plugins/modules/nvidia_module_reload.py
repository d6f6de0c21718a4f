#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_module_reload
short_description: Reload the NVIDIA kernel modules when the loaded one is older than the userspace driver
version_added: 0.1.0
description:
  - Ends the driver/library version skew a driver package upgrade leaves until the next boot (NVML fails with
    C(Driver/library version mismatch)) without a reboot, when nothing uses the GPUs.
  - Reloads only when the loaded module (C(/sys/module/nvidia/version)) is older than the userspace driver, the
    module on disk (C(modinfo -F version nvidia)) is the userspace's version, and no process holds a
    C(/dev/nvidia*) device but the main processes of the active O(services) (they are stopped for the reload).
    Otherwise it changes nothing and says why in RV(reason).
  - Stops the host services of O(services) that are active (they keep the devices open), unloads the NVIDIA modules
    with one C(modprobe -r) in dependency order (C(nvidia_peermem), C(nvidia_drm), C(nvidia_modeset),
    C(nvidia_uvm), C(nvidia)), loads those modules again (C(nvidia) first), confirms that
    C(/sys/module/nvidia/version) is the userspace's version and starts the services it stopped.
  - When the kernel refuses the unload (a module in use), the services are started again and RV(reloaded) is
    false with the refusal in RV(reason); the caller reboots the node instead. The module does not fail then.
  - It does not look at Kubernetes; the caller checks that no pod holds a GPU of the node first.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reports the plan (RV(plan)) and whether it would reload; stops, unloads and loads nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  userspace_version:
    description:
      - The userspace driver's version the loaded module must end at.
      - When not set, the version in the file name C(libnvidia-ml.so.1) resolves to (for example
        C(libnvidia-ml.so.550.54.15)).
    type: str
  services:
    description:
      - Host services that keep the NVIDIA devices open while they run; those active are stopped before the unload
        and started again after it, whatever its outcome.
    type: list
    elements: str
    default: [nvidia-persistenced, nvidia-fabricmanager, nvidia-dcgm, dcgm-exporter]
  timeout:
    description:
      - Time limit of each command (C(systemctl), C(modinfo), C(modprobe)), in seconds.
    type: int
    default: 120
notes:
  - Needs root. C(modprobe -r) of a module in use is refused by the kernel, never forced.
seealso:
  - module: gpuops.nvidia.nvidia_driver_facts
"""

EXAMPLES = r"""
- name: Load the upgraded driver without a reboot when nothing uses the GPUs
  gpuops.nvidia.nvidia_module_reload:
  register: reload

- name: Reboot instead when the reload was not possible
  ansible.builtin.reboot:
  when: not reload.reloaded
"""

RETURN = r"""
reloaded:
  description: The modules were unloaded and loaded again, and the loaded module is now the userspace's version.
  returned: always
  type: bool
  sample: true
reason:
  description: Why it reloaded, or why not (no skew, the GPU in use, the kernel's refusal, a failed load).
  returned: always
  type: str
  sample: "modprobe -r refused: modprobe: FATAL: Module nvidia is in use."
plan:
  description: The decision before any change; RV(plan.reload) is what check mode would do.
  returned: always
  type: dict
  contains:
    reload:
      description: Whether the reload is to be done.
      type: bool
    reason:
      description: Why.
      type: str
    unload:
      description: The modules to unload, in order.
      type: list
      elements: str
    load:
      description: The modules to load again, in order.
      type: list
      elements: str
version_before:
  description: The loaded module's version before (null when none was loaded).
  returned: always
  type: str
  sample: 550.54.14
version_after:
  description: The loaded module's version after the reload (the same as RV(version_before) when nothing was done).
  returned: always
  type: str
  sample: 550.54.15
userspace_version:
  description: The userspace driver's version.
  returned: always
  type: str
  sample: 550.54.15
holders:
  description: The processes holding a C(/dev/nvidia*) device (C(pid N)), as read before any change, the services'
    main processes left out.
  returned: always
  type: list
  elements: str
  sample: []
stopped_services:
  description: The services stopped for the unload (and started again).
  returned: always
  type: list
  elements: str
  sample: [nvidia-persistenced]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.module_reload import (
    DEFAULT_SERVICES,
    is_in_use_error,
    parse_main_pid,
    plan_reload,
    workload_holders,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.node_facts import installed_nvml_library_version

SYS_MODULE = "/sys/module"


def read_module_version():
    try:
        with open(os.path.join(SYS_MODULE, "nvidia", "version")) as stream:
            return stream.read().strip() or None
    except (IOError, OSError):
        return None


def loaded_modules():
    return [name for name in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
            if os.path.isdir(os.path.join(SYS_MODULE, name))]


def device_holder_pids():
    """The processes with a /dev/nvidia* device open (what lsof /dev/nvidia* lists)."""
    holders = []
    for entry in sorted(os.listdir("/proc"), key=lambda name: int(name) if name.isdigit() else -1):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fd_dir = os.path.join("/proc", entry, "fd")
        try:
            names = os.listdir(fd_dir)
        except (IOError, OSError):
            continue
        for name in names:
            try:
                target = os.readlink(os.path.join(fd_dir, name))
            except (IOError, OSError):
                continue
            if target.startswith("/dev/nvidia"):
                holders.append(int(entry))
                break
    return holders


def main():
    module = AnsibleModule(
        argument_spec=dict(
            userspace_version=dict(type="str"),
            services=dict(type="list", elements="str", default=list(DEFAULT_SERVICES)),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, got %s" % params["timeout"])
    runner = CommandRunner(module, params["timeout"])
    userspace = params["userspace_version"] or installed_nvml_library_version()
    before = read_module_version()
    modinfo = runner.run(["modinfo", "-F", "version", "nvidia"]) if runner.find("modinfo") else None
    on_disk = modinfo.stdout.strip() if modinfo is not None and modinfo.ok else None
    systemctl = runner.find("systemctl")
    active, service_pids = [], []
    for service in params["services"] if systemctl else []:
        if runner.run([systemctl, "is-active", "--quiet", service]).rc == 0:
            active.append(service)
            service_pids.append(parse_main_pid(runner.run([systemctl, "show", "--property=MainPID", service]).stdout))
    holders = workload_holders(device_holder_pids(), service_pids)
    plan = plan_reload(before, userspace, on_disk, loaded_modules(), holders)
    result = dict(changed=False, reloaded=False, reason=plan["reason"], plan=plan, version_before=before,
                  version_after=before, userspace_version=userspace, holders=holders, stopped_services=[])
    if not plan["reload"] or module.check_mode:
        result["changed"] = plan["reload"]
        module.exit_json(**result)

    modprobe = runner.find("modprobe", required=True)
    stopped = []
    for service in active:
        runner.run_or_fail([systemctl, "stop", service], what="systemctl stop %s" % service)
        stopped.append(service)
    result.update(changed=bool(stopped), stopped_services=stopped)
    unload = runner.run([modprobe, "-r"] + plan["unload"])
    if not unload.ok:
        why = "refused (the module is in use)" if is_in_use_error(unload.stderr) else "failed"
        result["reason"] = "modprobe -r %s: %s" % (why, unload.first_error_line())
    else:
        result["changed"] = True
        load = runner.run([modprobe, "-a"] + plan["load"])
        after = read_module_version()
        result["version_after"] = after
        if not load.ok:
            result["reason"] = "modprobe -a %s failed: %s" % (" ".join(plan["load"]), load.first_error_line())
        elif after != userspace:
            result["reason"] = "the module loaded is %s, not the userspace's %s" % (after, userspace)
        else:
            result.update(reloaded=True, reason="reloaded: %s -> %s" % (before, after))
    for service in stopped:
        started = runner.run([systemctl, "start", service])
        if not started.ok:
            result["reason"] += "; systemctl start %s failed: %s" % (service, started.first_error_line())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
