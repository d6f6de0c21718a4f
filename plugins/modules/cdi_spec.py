#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: cdi_spec
short_description: Write, validate and remove a CDI (Container Device Interface) spec file
version_added: 0.1.0
description:
  - Writes a CDI spec file (for example C(/etc/cdi/nvidia.yaml) or C(/var/run/cdi/nvidia.json)) that
    containerd, CRI-O, Podman and Docker read to inject GPUs into containers.
  - The devices come from the O(devices) and O(container_edits) options, from the output of
    C(nvidia-ctk cdi generate) (O(generator=nvidia-ctk)), or from the facts of
    M(gpuops.nvidia.nvidia_driver_facts) (O(generator=facts)).
  - Before anything is written the spec is checked against the CDI JSON schema and the stricter rules of the
    reference Go library (unknown fields, kind and device-name syntax, unique device names, C(KEY=VALUE)
    environment entries, hook names, non-empty device edits, C(cdiVersion)). Errors name the field, for
    example C(devices[2].containerEdits.env[0]).
  - C(cdiVersion) is the lowest version the fields in use need, unless O(cdi_version) pins one; a pin lower than
    that minimum fails. Specs from C(nvidia-ctk) keep the version C(nvidia-ctk) chose (it is still checked).
  - Reports a spec as stale when it points at host files that no longer exist (mounts, hooks, device nodes), the
    usual state after a driver upgrade; with O(generator) the spec is then regenerated. O(state=refreshed)
    regenerates a spec only where one exists (after a driver upgrade, a node without CDI stays without).
  - Compares parsed content, not bytes, so a re-run is idempotent. The file is written to a temporary file in
    the same directory whose name CDI readers skip (C(.NAME.XXXX.tmp)) and renamed into place, mode C(0644).
  - Warns when another spec file in the same directory defines the same kind and device names, because CDI
    refuses a device that two files of one directory both define.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  state:
    description:
      - V(present) writes the spec, V(absent) removes the file.
      - V(refreshed) is V(present) for a spec that exists and does nothing when there is none (RV(spec) is then
        null); it needs O(generator).
    type: str
    choices: [present, absent, refreshed]
    default: present
  path:
    description:
      - The spec file. It must end in C(.yaml) or C(.json), the only extensions CDI runtimes load (C(.yml) files
        are silently ignored by them, so this module refuses them).
      - The format follows the extension. The directory is created (mode C(0755)) when missing.
    type: path
    required: true
  kind:
    description:
      - The CDI kind, C(vendor.com/class). Devices are then requested as C(KIND=NAME), for example
        C(nvidia.com/gpu=0).
    type: str
    default: nvidia.com/gpu
  devices:
    description:
      - The devices, each in CDI's own schema (keys as in the spec file) with C(name) and C(containerEdits)
        (C(deviceNodes), C(mounts), C(hooks), C(env), C(additionalGids), C(intelRdt), C(netDevices)) and optional
        C(annotations).
      - Required with O(state=present) unless O(generator) is set.
    type: list
    elements: dict
  container_edits:
    description:
      - Spec-level container edits applied whenever any device of the spec is injected, same schema as a
        device's C(containerEdits).
      - With O(generator=facts) they are appended to the generated spec-level edits. Not allowed with
        O(generator=nvidia-ctk).
    type: dict
  annotations:
    description:
      - Spec-level annotations (CDI metadata, not container annotations). Needs C(cdiVersion) 0.6.0 or later.
      - Not allowed with O(generator=nvidia-ctk).
    type: dict
  generator:
    description:
      - Where the devices come from when O(devices) is not given.
      - V(nvidia-ctk) runs C(nvidia-ctk cdi generate --format json) and takes its output.
      - V(auto) is V(nvidia-ctk) when O(nvidia_ctk) is found and V(facts) otherwise (O(facts) is then required).
      - V(facts) builds device-node-only devices from O(facts), named C(0), the GPU UUID, C(GPU:MIG), the MIG
        UUID and C(all), with C(/dev/nvidiaN) per GPU, C(/dev/nvidia-caps/nvidia-capN) plus the parent GPU node per
        MIG device, and spec-level C(/dev/nvidiactl), C(/dev/nvidia-uvm), C(/dev/nvidia-uvm-tools) and
        C(/dev/nvidia-modeset) when the facts list them. It mounts no driver libraries.
    type: str
    choices: [nvidia-ctk, facts, auto]
  nvidia_ctk:
    description:
      - The C(nvidia-ctk) program, a name looked up on E(PATH) or an absolute path.
    type: str
    default: nvidia-ctk
  nvidia_ctk_args:
    description:
      - Extra arguments for C(nvidia-ctk cdi generate), for example C(--driver-root=/run/nvidia/driver) or
        C(--device-name-strategy=uuid). C(--vendor) and C(--class) are added from O(kind) when it is not the
        default.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds C(nvidia-ctk cdi generate) may run (under coreutils C(timeout) when present).
    type: int
    default: 60
  facts:
    description:
      - The C(ansible_facts.nvidia_driver) dictionary returned by M(gpuops.nvidia.nvidia_driver_facts). Required
        with O(generator=facts). Uses C(gpus[].index), C(gpus[].uuid), C(gpus[].mig_devices[]) and
        C(device_nodes[].path).
    type: dict
  cdi_version:
    description:
      - Pin C(cdiVersion) instead of computing the minimum the used fields need. Must be a released CDI version
        and not lower than that minimum.
    type: str
notes:
  - Reading an existing YAML spec needs PyYAML on the target. Without PyYAML a C(.yaml) file is written as JSON
    text, which is valid YAML 1.2 and which CDI runtimes read; with PyYAML it is written as YAML.
  - With O(generator=facts) GPU index N is taken to be C(/dev/nvidiaN); this holds when the driver numbers GPUs
    in PCI order, as it does by default.
seealso:
  - name: CDI specification
    description: The Container Device Interface specification and reference library.
    link: https://github.com/cncf-tags/container-device-interface/blob/main/SPEC.md
  - module: gpuops.nvidia.nvidia_driver_facts
"""

EXAMPLES = r"""
- name: Generate /etc/cdi/nvidia.yaml with nvidia-ctk (regenerated when a driver upgrade left it stale)
  gpuops.nvidia.cdi_spec:
    path: /etc/cdi/nvidia.yaml
    generator: nvidia-ctk

- name: Build a device-node-only spec from the driver facts
  block:
    - name: Gather the driver facts
      gpuops.nvidia.nvidia_driver_facts:

    - name: Write the spec
      gpuops.nvidia.cdi_spec:
        path: /var/run/cdi/nvidia-nodes.json
        generator: facts
        facts: "{{ ansible_facts.nvidia_driver }}"

- name: Write an explicit spec
  gpuops.nvidia.cdi_spec:
    path: /etc/cdi/vendor.yaml
    kind: vendor.com/device
    devices:
      - name: card1
        containerEdits:
          deviceNodes:
            - path: /dev/card1
    container_edits:
      env:
        - VENDOR_VISIBLE_DEVICES=void

- name: After a driver upgrade, regenerate the spec where the node has one (nvidia-ctk when installed, else the facts)
  gpuops.nvidia.cdi_spec:
    path: /etc/cdi/nvidia.yaml
    state: refreshed
    generator: auto
    facts: "{{ ansible_facts.nvidia_driver }}"

- name: Remove a spec
  gpuops.nvidia.cdi_spec:
    path: /etc/cdi/vendor.yaml
    state: absent
"""

RETURN = r"""
path:
  description: The spec file.
  returned: always
  type: str
  sample: /etc/cdi/nvidia.yaml
cdi_version:
  description: The C(cdiVersion) of the spec written (or that would be written); null with O(state=absent).
  returned: always
  type: str
  sample: 0.5.0
devices:
  description: The device names of the spec.
  returned: always
  type: list
  elements: str
  sample: ["0", "GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", "all"]
stale:
  description: Whether the spec that was on disk before this run pointed at host files that no longer exist.
  returned: always
  type: bool
  sample: false
missing_paths:
  description: The host files (mount C(hostPath), hook C(path), device node C(hostPath) or C(path)) of the spec that
    was on disk before this run that do not exist.
  returned: always
  type: list
  elements: str
  sample: ["/usr/lib/x86_64-linux-gnu/libcuda.so.535.86.05"]
generator:
  description: The generator used (V(auto) resolved to V(nvidia-ctk) or V(facts)); null without O(generator).
  returned: always
  type: str
  sample: nvidia-ctk
spec:
  description: The spec content written (or that would be written); null with O(state=absent) and with
    O(state=refreshed) when there was no spec.
  returned: always
  type: dict
  sample: {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
           "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}
errors:
  description:
    - Every reason the spec was refused, field path first; the module then fails, writes nothing, and its
      message shows the first five. RV(spec) is then the refused spec.
  returned: when the spec is invalid
  type: list
  elements: str
  sample: ['devices[0].containerEdits.env[0]: "FOO" must be KEY=VALUE']
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import files as _host_files
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import cdi as _cdi

# At most this many validation errors go into msg; all are in the errors return value.
_ERRORS_IN_MESSAGE = 5


def _read_existing(module, path, fmt):
    """(text, parsed spec or None); warns when the file is there but is not a spec."""
    try:
        text = _host_files.read_text(path, strict=True)
    except (IOError, OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)))
    if text is None:
        return None, None
    try:
        return text, _cdi.parse(text, fmt)
    except _cdi.YAMLUnavailableError as exc:
        module.fail_json(msg="%s: %s" % (path, to_native(exc)))
    except _cdi.CDIError as exc:
        module.warn("%s is not a readable CDI spec (%s); it will be replaced" % (path, to_native(exc)))
        return text, None


def _nvidia_ctk_binary(module):
    """The nvidia-ctk program to run (O(nvidia_ctk): a name on PATH or an absolute path); None when not executable."""
    program = module.params["nvidia_ctk"]
    binary = program if os.path.isabs(program) else module.get_bin_path(program)
    return binary if binary and os.access(binary, os.X_OK) else None


def _run_nvidia_ctk(module, kind):
    program = module.params["nvidia_ctk"]
    binary = _nvidia_ctk_binary(module)
    if not binary:
        module.fail_json(msg="generator=nvidia-ctk: %s not found or not executable (install nvidia-container-toolkit "
                             "or set nvidia_ctk)" % program)
    argv = [binary, "cdi", "generate", "--format", "json"]
    if kind != _cdi.DEFAULT_KIND:
        vendor, _sep, device_class = kind.partition("/")
        argv += ["--vendor", vendor, "--class", device_class]
    argv += module.params["nvidia_ctk_args"]
    run = CommandRunner(module, module.params["timeout"]).run(argv)
    if run.rc != 0:
        said = run.stderr.strip() or run.stdout.strip()
        module.fail_json(msg="nvidia-ctk cdi generate failed (rc %d): %s" % (run.rc, said),
                         cmd=argv, rc=run.rc, stdout=run.stdout, stderr=run.stderr)
    try:
        spec = _cdi.parse(run.stdout, "yaml")
    except _cdi.CDIError as exc:
        module.fail_json(msg="cannot parse the output of nvidia-ctk cdi generate: %s" % to_native(exc), cmd=argv,
                         stdout=run.stdout)
    if not isinstance(spec, dict) or spec.get("kind") != kind:
        module.fail_json(msg="nvidia-ctk cdi generate produced kind %r, expected %r"
                             % (spec.get("kind") if isinstance(spec, dict) else None, kind), cmd=argv)
    return spec


def _desired_spec(module):
    """The spec the options ask for (not yet validated)."""
    params = module.params
    kind, pinned = params["kind"], params["cdi_version"]
    try:
        if params["generator"] == "nvidia-ctk":
            spec = _run_nvidia_ctk(module, kind)
            if pinned is not None:
                spec["cdiVersion"] = _cdi.choose_version(spec, pinned)
            return spec
        devices, edits = params["devices"], params["container_edits"]
        if params["generator"] == "facts":
            devices, generated_edits = _cdi.devices_from_facts(params["facts"])
            edits = _cdi.merge_edits(generated_edits, edits)
        return _cdi.build_spec(kind, devices, edits, params["annotations"], pinned)
    except _cdi.CDIError as exc:
        module.fail_json(msg=to_native(exc))


def _fail_if_invalid(module, spec):
    errors = _cdi.validate_spec(spec)
    if errors:
        shown = "; ".join(errors[:_ERRORS_IN_MESSAGE])
        more = " (and %d more)" % (len(errors) - _ERRORS_IN_MESSAGE) if len(errors) > _ERRORS_IN_MESSAGE else ""
        module.fail_json(msg="invalid CDI spec, nothing written: %s%s" % (shown, more), errors=errors, spec=spec)


def _other_specs(module, path):
    """(file, parsed spec) of the other *.json/*.yaml files in the directory of path (unreadable ones skipped)."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        return
    for entry in sorted(os.listdir(directory)):
        other = os.path.join(directory, entry)
        if other == path or not os.path.isfile(other) or not entry.endswith((".json", ".yaml")):
            continue
        try:
            yield other, _cdi.parse(_host_files.read_text(other, strict=True), _cdi.spec_format(other))
        except _cdi.YAMLUnavailableError:
            module.warn("cannot check %s for duplicate devices: reading YAML needs PyYAML" % other)
        except (_cdi.CDIError, IOError, OSError, UnicodeDecodeError):
            continue


def _warn_duplicates(module, path, spec):
    for other, other_spec in _other_specs(module, path):
        duplicates = _cdi.duplicate_devices(spec, other_spec)
        if duplicates:
            module.warn("%s also defines %s devices %s; CDI refuses a device that two spec files of one directory "
                        "define, so requests for it will fail" % (other, spec["kind"], ", ".join(duplicates)))


def _diff(path, before_text, after_text):
    return {"before": before_text or "", "after": after_text or "", "before_header": path, "after_header": path}


def _no_spec_result(module, path):
    return {"changed": False, "path": path, "cdi_version": None, "devices": [], "stale": False,
            "missing_paths": [], "spec": None, "generator": module.params["generator"]}


def _remove(module, path):
    result = _no_spec_result(module, path)
    if not os.path.lexists(path):
        module.exit_json(**result)
    try:
        before_text = _host_files.read_text(path, strict=True)
    except (IOError, OSError, UnicodeDecodeError):
        before_text = ""
    result["changed"] = True
    if module._diff:
        result["diff"] = _diff(path, before_text, "")
    if not module.check_mode:
        try:
            os.unlink(path)
        except OSError as exc:
            module.fail_json(msg="cannot remove %s: %s" % (path, to_native(exc)))
    module.exit_json(**result)


def _ensure_present(module, path, fmt):
    before_text, existing = _read_existing(module, path, fmt)
    spec = _desired_spec(module)
    _fail_if_invalid(module, spec)
    missing_paths = _cdi.missing_host_paths(existing, os.path.exists) if existing else []
    new_missing = _cdi.missing_host_paths(spec, os.path.exists)
    if new_missing:
        module.warn("the spec points at host files that do not exist: %s" % ", ".join(new_missing))
    _warn_duplicates(module, path, spec)
    changed = not _cdi.specs_equal(existing, spec)
    after_text = _cdi.render(spec, fmt) if changed else before_text
    result = {"changed": changed, "path": path, "cdi_version": spec["cdiVersion"], "devices": _cdi.device_names(spec),
              "stale": bool(missing_paths), "missing_paths": missing_paths, "spec": spec,
              "generator": module.params["generator"]}
    if module._diff:
        result["diff"] = _diff(path, before_text, after_text)
    if changed and not module.check_mode:
        try:
            _host_files.write_atomic(path, to_bytes(after_text))
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, to_native(exc)))
    module.exit_json(**result)


def resolve_auto_generator(module):
    """nvidia-ctk when the program is there, else the facts (which must then be given)."""
    if _nvidia_ctk_binary(module):
        return "nvidia-ctk"
    if not module.params["facts"]:
        module.fail_json(msg="generator=auto: %s not found and no facts given to build the spec from"
                             % module.params["nvidia_ctk"])
    return "facts"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent", "refreshed"], default="present"),
            path=dict(type="path", required=True),
            kind=dict(type="str", default=_cdi.DEFAULT_KIND),
            devices=dict(type="list", elements="dict"),
            container_edits=dict(type="dict"),
            annotations=dict(type="dict"),
            generator=dict(type="str", choices=["nvidia-ctk", "facts", "auto"]),
            nvidia_ctk=dict(type="str", default="nvidia-ctk"),
            nvidia_ctk_args=dict(type="list", elements="str", default=[]),
            facts=dict(type="dict"),
            cdi_version=dict(type="str"),
            timeout=dict(type="int", default=60),
        ),
        mutually_exclusive=[("devices", "generator")],
        required_if=[("state", "present", ("devices", "generator"), True), ("state", "refreshed", ("generator",)),
                     ("generator", "facts", ("facts",))],
        supports_check_mode=True,
    )
    path = os.path.abspath(module.params["path"])
    try:
        fmt = _cdi.spec_format(path)
    except _cdi.CDIError as exc:
        module.fail_json(msg=to_native(exc))
    if module.params["state"] == "refreshed" and not os.path.lexists(path):
        module.exit_json(**_no_spec_result(module, path))
    if module.params["generator"] == "auto":
        module.params["generator"] = resolve_auto_generator(module)
    if module.params["generator"] == "nvidia-ctk":
        for option in ("container_edits", "annotations"):
            if module.params[option]:
                module.fail_json(msg="%s cannot be combined with generator=nvidia-ctk (it writes the whole spec)" % option)
    kind_message = _cdi.kind_error(module.params["kind"])
    if kind_message:
        module.fail_json(msg="kind: %s" % kind_message)
    if module.params["state"] == "absent":
        _remove(module, path)
    _ensure_present(module, path, fmt)


if __name__ == "__main__":
    main()
