#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_facts
short_description: Gather NVIDIA GPU driver facts (PCI, kernel module, Secure Boot, DKMS, NVML, Xid) and diagnose them
version_added: 0.1.0
description:
  - Reads layers 0-2 of the GPU node troubleshooting method, read-only, and returns them as
    C(ansible_facts.nvidia_driver) together with an ordered C(diagnosis).
  - Layer 0 (hardware) from C(/sys/bus/pci/devices); layer 1 (kernel driver) from C(/proc/modules) (or C(lsmod)),
    C(/proc/driver/nvidia/version), C(modinfo nvidia), C(mokutil) (or the efivars C(SecureBoot) and C(SetupMode)
    variables), C(dkms status), C(/lib/modules/<release>/build) and the C(/dev/nvidia*) character devices;
    layer 2 (NVML) from one C(nvidia-smi -q -x) call, plus C(nvidia-smi -L) only when a GPU has MIG enabled.
  - Xid events come from C(dmesg --time-format=iso), then plain C(dmesg), then C(journalctl -k) when C(dmesg) is
    not permitted.
  - A missing tool never fails the module; the facts it would give are null and the diagnosis holds a
    C(data_source_unavailable) (or C(nvidia_smi_not_found)) entry. The module fails only on invalid options.
  - See C(docs/nvidia_driver_facts.md) in the collection for every fact and diagnosis code.
author: gpuops.nvidia contributors (@gpuops)
options:
  nvidia_smi:
    description:
      - Path of the C(nvidia-smi) binary.
      - When not set, C(nvidia-smi) is searched in E(PATH) and the sbin directories.
    type: path
  gather_subset:
    description:
      - Which groups of facts to gather. Choices are V(all), V(pci), V(kernel), V(nvml), V(secure_boot),
        V(dkms) and V(xid).
      - Prefix a name with V(!) to exclude it, as for M(ansible.builtin.setup). A list of only exclusions
        starts from V(all).
      - Facts of groups not gathered keep their empty value (V(null), V([]) or V(false)) and are not diagnosed.
    type: list
    elements: str
    default: [all]
  xid_since_boot:
    description:
      - Only report Xid events of the current boot.
      - C(dmesg) only holds the current boot; when V(false), C(journalctl -k) (all boots in the journal) is
        tried first.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each external command may run.
      - Enforced by running the command under coreutils C(timeout) when that is in E(PATH); without it the
        commands run unbounded.
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
  - Run as root for complete facts; without root C(dmesg) may be refused (C(kernel.dmesg_restrict)) and
    C(/proc/driver/nvidia) is still readable.
seealso:
  - name: NVIDIA Xid errors
    description: NVIDIA's catalog of Xid error codes.
    link: https://docs.nvidia.com/deploy/xid-errors/index.html
"""

EXAMPLES = r"""
- name: Gather NVIDIA driver facts
  gpuops.nvidia.nvidia_driver_facts:

- name: Fail when the node has a critical driver problem
  ansible.builtin.assert:
    that: ansible_facts.nvidia_driver.diagnosis | selectattr('severity', 'equalto', 'critical') | list | length == 0
    fail_msg: "{{ ansible_facts.nvidia_driver.diagnosis | map(attribute='message') | list }}"

- name: Only the kernel side, without the Xid scan
  gpuops.nvidia.nvidia_driver_facts:
    gather_subset: [kernel, secure_boot, dkms]

- name: Everything but DKMS, with a custom nvidia-smi
  gpuops.nvidia.nvidia_driver_facts:
    nvidia_smi: /usr/local/nvidia/bin/nvidia-smi
    gather_subset: ['!dkms']
    timeout: 60
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    nvidia_driver:
      description: NVIDIA driver state of the host, layers 0-2, and its diagnosis.
      returned: always
      type: dict
      contains:
        pci_devices:
          description: NVIDIA GPU (class 0x03xxxx) and NVSwitch (class 0x0680xx) PCI functions and their bound driver.
          type: list
          elements: dict
          returned: always
          sample: [{address: "0000:18:00.0", vendor_id: "0x10de", device_id: "0x2330", class_id: "0x030200", driver: nvidia}]
        nouveau_loaded:
          description: Whether the nouveau module is loaded.
          type: bool
          returned: always
        kernel_module:
          description:
            - The nvidia kernel module. V(version) and V(flavor) are the loaded module's when loaded, else the on-disk one's.
            - V(signer), V(sig_key), V(license), V(filename) and V(vermagic) come from C(modinfo nvidia).
          type: dict
          returned: always
          sample: {loaded: true, version: "535.129.03", flavor: open, companions: [nvidia_uvm, nvidia_drm],
                   signer: null, sig_key: null, license: "Dual MIT/GPL", filename: /lib/modules/6.1.0-18-amd64/updates/dkms/nvidia.ko,
                   vermagic: "6.1.0-18-amd64 SMP preempt mod_unload modversions"}
        userspace:
          description: What nvidia-smi/NVML says; V(error) and V(error_kind) explain a failure.
          type: dict
          returned: always
          sample: {nvidia_smi_path: /usr/bin/nvidia-smi, driver_version: "535.129.03", cuda_version: "12.2", nvml_ok: true,
                   error: null, error_kind: null, nvml_library_version: null}
        version_mismatch:
          description: The loaded kernel module and the userspace driver have different versions.
          type: bool
          returned: always
        device_nodes:
          description: C(/dev/nvidia*) character devices with their major and minor numbers.
          type: list
          elements: dict
          returned: always
          sample: [{path: /dev/nvidia0, major: 195, minor: 0}]
        gpus:
          description: GPUs as NVML reports them (memory in MiB, power in W, temperature in C), MIG devices included.
          type: list
          elements: dict
          returned: always
        gpu_count:
          description: Number of GPUs NVML reported.
          type: int
          returned: always
        secure_boot:
          description: Secure Boot state; V(enabled) is null on legacy BIOS boots or when it cannot be read.
          type: dict
          returned: always
          sample: {enabled: true, setup_mode: false, source: mokutil}
        mok:
          description: Enrolled and pending Machine Owner Keys (subject, SHA1 fingerprint lower-case without colons).
          type: dict
          returned: always
          sample: {enrolled: [{subject: "CN=ubuntu Secure Boot Module Signature key", fingerprint: "76a092065800bf376901c372cd55a90e1fded2e0"}], pending: []}
        dkms:
          description: C(dkms status) entries of NVIDIA modules.
          type: list
          elements: dict
          returned: always
          sample: [{module: nvidia, version: "535.86.05", kernel: "6.1.0-18-amd64", arch: x86_64, state: installed, warning: null}]
        kernel:
          description:
            - Running kernel release and whether its headers (C(/lib/modules/<release>/build)) are present.
            - V(build_tools_missing) lists what a DKMS build of the module would miss besides the headers (C(dkms),
              C(make), a C compiler, the C library headers); empty when the node can build it, null when the
              V(kernel) subset was not gathered.
          type: dict
          returned: always
          sample: {release: "6.1.0-18-amd64", headers_present: true, headers_path: /lib/modules/6.1.0-18-amd64/build,
                   build_tools_missing: []}
        xid_events:
          description: Xid events from the kernel log.
          type: list
          elements: dict
          returned: always
          sample: [{code: 79, pci_address: "0000:44:00", pid: null, process: null, message: GPU has fallen off the bus, time: null}]
        diagnosis:
          description: Findings ordered by layer (0 hardware, 1 kernel driver, 2 NVML and GPU health) then severity; empty on a healthy node.
          type: list
          elements: dict
          returned: always
          sample: [{layer: 1, code: module_not_loaded, severity: critical, message: The nvidia kernel module is not loaded.,
                    remedy: Run 'modprobe nvidia' and read the kernel log.}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.diagnosis import resolve_gather_subset
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.node_facts import gather_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            gather_subset=dict(type="list", elements="str", default=["all"]),
            xid_since_boot=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, got %s" % params["timeout"])
    try:
        subsets = resolve_gather_subset(params["gather_subset"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    facts = gather_facts(CommandRunner(module, params["timeout"]), subsets, nvidia_smi=params["nvidia_smi"],
                         xid_since_boot=params["xid_since_boot"])
    module.exit_json(changed=False, ansible_facts={"nvidia_driver": facts})


if __name__ == "__main__":
    main()
