#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_precheck_facts
short_description: Check that a host can become a GPU node, reading everything in one call
version_added: 0.1.0
description:
  - Reads, read-only, what the GPU node runbook needs before anything is changed, and returns it with a
    verdict in C(ansible_facts.gpu_node_precheck).
  - Read are the NVIDIA PCI functions and nouveau, Secure Boot and whether a module-signing key is enrolled,
    staged or can be made, kernel headers for the running kernel and for the newest installed kernel image
    (the next boot), the C(containerd) version (CDI needs 1.7, the GPU Operator 26.x needs 2.0), the kubelet
    device-plugin directory (honouring a non-default kubelet root dir), free disk space, swap and huge pages.
  - The verdict lists B(every) unmet requirement, each with its remedy, and notes that need no action now.
    The module itself never fails on an unmet requirement; the C(gpuops.nvidia.precheck) role fails once,
    listing them all.
author: gpuops.nvidia contributors (@gpuops)
options:
  driver_version:
    description:
      - The full NVIDIA driver version the node will get (C(580.95.05)); checked against the node's GPUs.
      - Not checked when not set.
    type: str
  cuda_version:
    description:
      - The CUDA version workloads need (C(12.8)); checked against the driver and the GPUs (CUDA 13 dropped
        Maxwell, Pascal and Volta).
    type: str
  kernel_module_type:
    description:
      - The kernel module flavour that will be installed; V(auto) picks it from the GPU generations.
    type: str
    choices: [auto, open, proprietary]
    default: auto
  secure_boot_sign:
    description:
      - V(auto) signs the modules when Secure Boot is on, V(always) also when it is off, V(never) never (an
        unmet requirement when Secure Boot is on).
    type: str
    choices: [auto, always, never]
    default: auto
  mok_certificate:
    description: The module-signing certificate (DER) that is or will be enrolled.
    type: path
    default: /var/lib/gpuops/mok/MOK.der
  mok_private_key:
    description: The private key of O(mok_certificate).
    type: path
    default: /var/lib/gpuops/mok/MOK.priv
  allow_key_creation:
    description: Whether a missing signing key may be created on the node (else it is an unmet requirement).
    type: bool
    default: true
  allow_key_enrollment:
    description:
      - Whether a signing key that is not enrolled yet may be staged for enrolment, to be confirmed at the console
        (MokManager) at the next boot. V(false), for unattended runs, makes a needed key that is not enrolled (absent,
        present or only staged) an unmet requirement.
    type: bool
    default: true
  kubelet_root_dir:
    description:
      - The kubelet root dir. When not set, the C(--root-dir) of C(/var/lib/kubelet/kubeadm-flags.env),
        C(/etc/default/kubelet) or C(/etc/sysconfig/kubelet), else C(/var/lib/kubelet).
    type: path
  require_kubelet:
    description: Whether the kubelet device-plugin directory must exist (the node has joined the cluster).
    type: bool
    default: true
  require_containerd:
    description: Whether containerd must be installed.
    type: bool
    default: true
  container_runtime_path:
    description:
      - V(cdi) requires containerd 1.7+; V(legacy) the nvidia runtime without CDI; V(auto) CDI where containerd
        supports it, else legacy (a note says so).
    type: str
    choices: [auto, cdi, legacy]
    default: auto
  gpu_operator:
    description: The GPU Operator (26.x) will run on the node; it needs containerd 2.0+.
    type: bool
    default: false
  min_free_mib:
    description: Free space needed per path, in MiB. A path that is no mount point is measured on its file system.
    type: dict
    default: {/var: 2048, /usr: 1024, /boot: 256, /tmp: 768}
  swap_off:
    description: Whether swap must be off.
    type: bool
    default: true
  hugepages_total:
    description: The number of default-size huge pages the node must have; not checked when not set.
    type: int
  timeout:
    description: Seconds each external command may run (under coreutils C(timeout) when present).
    type: int
    default: 30
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.FACTS
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: linux
notes:
  - Run as root (C(become)), as C(mokutil) and the kubelet files need it.
seealso:
  - module: gpuops.nvidia.nvidia_driver_facts
"""

EXAMPLES = r"""
- name: Check the node before installing driver 580.95.05 for CUDA 13.0
  gpuops.nvidia.node_precheck_facts:
    driver_version: 580.95.05
    cuda_version: "13.0"

- name: Fail once, listing every unmet requirement
  ansible.builtin.fail:
    msg: "{{ ansible_facts.gpu_node_precheck.failure_message }}"
  when: not ansible_facts.gpu_node_precheck.verdict.ok
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpu_node_precheck:
      description: What was read and the verdict.
      returned: always
      type: dict
      contains:
        pci_devices:
          description: NVIDIA GPU and NVSwitch PCI functions, with the generation of each GPU.
          type: list
          elements: dict
          returned: always
          sample: [{address: "0000:18:00.0", device_id: "0x2330", class_id: "0x030200", driver: nouveau, generation: hopper}]
        nouveau_loaded:
          description: Whether the nouveau module is loaded.
          type: bool
          returned: always
        secure_boot:
          description: Secure Boot state (V(enabled) null on legacy BIOS or when unknown) and whether EFI is there.
          type: dict
          returned: always
          sample: {enabled: true, efi: true}
        mok:
          description: The signing key at O(mok_certificate) and its enrolment, and the tools signing needs.
          type: dict
          returned: always
          sample: {certificate_path: /var/lib/gpuops/mok/MOK.der, key_present: false, enrolled: false, pending: false,
                   tools: {openssl: true, mokutil: true}}
        kernel:
          description: Running kernel, newest installed kernel image, and whether each has its headers.
          type: dict
          returned: always
          sample: {running: 6.8.0-45-generic, running_headers: true, newest_installed: 6.8.0-49-generic, newest_headers: false}
        containerd:
          description: Whether containerd is installed and its version.
          type: dict
          returned: always
          sample: {present: true, version: 1.7.20}
        kubelet:
          description: The kubelet root dir used and whether its device-plugin directory exists.
          type: dict
          returned: always
          sample: {root_dir: /var/lib/kubelet, device_plugin_dir: /var/lib/kubelet/device-plugins, device_plugin_dir_present: true}
        disks:
          description: Free space per checked path, in MiB, with its mount point and threshold.
          type: list
          elements: dict
          returned: always
          sample: [{path: /var, mount: /, free_mib: 51200, min_free_mib: 2048}]
        swap:
          description: Active swap areas.
          type: list
          elements: dict
          returned: always
        hugepages:
          description: Default-size huge pages (total, free, size in KiB).
          type: dict
          returned: always
        verdict:
          description:
            - V(ok), every V(unmet) requirement and the V(notes) as C({code, message, remedy}), the kernel module
              type to install and the container runtime path (V(cdi), V(legacy) or null without containerd).
          type: dict
          returned: always
          sample: {ok: false, unmet: [{code: disk_free_low, message: "/var (on /) has 12 MiB free, 2048 MiB needed.",
                   remedy: "Free space on /."}], notes: [], kernel_module_type: open, container_runtime_path: cdi}
        failure_message:
          description: One text listing every unmet requirement with its remedy; empty when the verdict is ok.
          type: str
          returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.precheck_facts import gather_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            driver_version=dict(type="str"),
            cuda_version=dict(type="str"),
            kernel_module_type=dict(type="str", default="auto", choices=["auto", "open", "proprietary"]),
            secure_boot_sign=dict(type="str", default="auto", choices=["auto", "always", "never"]),
            mok_certificate=dict(type="path", default="/var/lib/gpuops/mok/MOK.der"),
            mok_private_key=dict(type="path", default="/var/lib/gpuops/mok/MOK.priv"),
            allow_key_creation=dict(type="bool", default=True),
            allow_key_enrollment=dict(type="bool", default=True),
            kubelet_root_dir=dict(type="path"),
            require_kubelet=dict(type="bool", default=True),
            require_containerd=dict(type="bool", default=True),
            container_runtime_path=dict(type="str", default="auto", choices=["auto", "cdi", "legacy"]),
            gpu_operator=dict(type="bool", default=False),
            min_free_mib=dict(type="dict", default={"/var": 2048, "/usr": 1024, "/boot": 256, "/tmp": 768}),
            swap_off=dict(type="bool", default=True),
            hugepages_total=dict(type="int"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for path, value in params["min_free_mib"].items():
        if not str(path).startswith("/") or not str(value).isdigit():
            module.fail_json(msg="min_free_mib maps absolute paths to MiB (whole numbers): %r: %r is not" % (path, value))
    facts = gather_facts(CommandRunner(module, params["timeout"]), params)
    module.exit_json(changed=False, ansible_facts={"gpu_node_precheck": facts})


if __name__ == "__main__":
    main()
