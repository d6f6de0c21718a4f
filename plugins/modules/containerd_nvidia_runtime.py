#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: containerd_nvidia_runtime
short_description: Configure containerd for the NVIDIA container runtime and CDI through a drop-in
version_added: 0.1.0
description:
  - Writes the containerd drop-in C(/etc/containerd/conf.d/99-nvidia.toml) that C(nvidia-ctk runtime configure)
    would write (byte for byte, in the schema of the detected containerd, config version 2 with plugin
    C(io.containerd.grpc.v1.cri) for containerd 1.6/1.7, version 3 with C(io.containerd.cri.v1.runtime) for
    2.x), and adds the drop-in's directory to the C(imports) of the main config.
  - The main config is never rewritten. Only its root C(imports) array is extended (or an C(imports) line
    inserted); comments and layout stay. A missing main config becomes C(imports) plus C(version).
  - The drop-in starts from a copy of the main config's CRI plugin table, because containerd 1.6 and 1.7 replace
    a whole plugin table from an imported file. Each NVIDIA runtime copies the options of the low-level runtime
    (the non-NVIDIA default runtime, else C(runc), else C(crun)), as C(nvidia-ctk) does.
  - The default runtime, C(runc) and C(crun) that containerd runs with today (C(containerd config dump), or
    C(containerd config default) without a main config) are repeated in the drop-in where the main config does not
    name them. containerd 1.6 and 1.7 replace the whole C(runtimes) table from the drop-in, and without C(runc)
    (Debian's and Ubuntu's stock configs name none) its CRI plugin would not load.
  - On k3s and RKE2 the generated C(config.toml) is never edited. When the generated config imports
    C(config-v3.toml.d/*.toml) or C(config.toml.d/*.toml) (recent k3s and RKE2 releases), the drop-in goes there.
    Otherwise the NVIDIA runtime comes from k3s's own detection of C(nvidia-container-runtime) and, with
    O(set_as_default), a C(config.yaml.d) file sets C(default-runtime).
  - Validates with the real C(containerd config dump) before (a broken config fails the task before anything
    changes) and after the write (the dump must show every runtime, C(enable_cdi), the default runtime asked for
    and an entry for the default runtime; otherwise the previous files are restored and the task fails).
  - Never restarts anything. When it changes a file it leaves a marker file; RV(restart_pending) is true until
    the caller restarts RV(service) and removes the marker.
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
  flavor:
    description:
      - Which containerd to configure. V(auto) picks V(rke2) or V(k3s) when their generated
        C(/var/lib/rancher/<flavor>/agent/etc/containerd/config.toml) exists, else V(containerd).
    type: str
    choices: [auto, containerd, k3s, rke2]
    default: auto
  config_path:
    description:
      - The main containerd config (flavor V(containerd) only).
    type: path
    default: /etc/containerd/config.toml
  drop_in_path:
    description:
      - The drop-in file (flavor V(containerd) only; on k3s and RKE2 it is C(99-nvidia.toml) in the directory the
        generated config imports). The main config imports C(<its directory>/*.toml).
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  runtimes:
    description:
      - The NVIDIA runtimes to add, the first one is the NVIDIA runtime proper (the one made default by
        O(set_as_default)). C(nvidia-ctk runtime configure) adds one named C(nvidia); the GPU Operator's toolkit
        adds C(nvidia-cdi) and C(nvidia-legacy) too.
    type: list
    elements: dict
    default: [{name: nvidia, binary: /usr/bin/nvidia-container-runtime}]
    suboptions:
      name:
        description: The runtime name, used as C(runtimeClassName)'s handler.
        type: str
        required: true
      binary:
        description: The runtime binary (C(options.BinaryName)).
        type: path
        required: true
  set_as_default:
    description:
      - Make the first runtime containerd's C(default_runtime_name), so that every pod runs under it.
    type: bool
    default: false
  enable_cdi:
    description:
      - Set C(enable_cdi = true) (off by default in containerd 1.7, on in 2.x). Ignored with a warning on
        containerd 1.6, which has no CDI support.
    type: bool
    default: true
  cdi_spec_dirs:
    description:
      - The CDI spec directories containerd reads. Empty leaves containerd's default
        (C(/etc/cdi), C(/var/run/cdi)) and writes nothing, as C(nvidia-ctk) does.
    type: list
    elements: path
    default: []
  containerd:
    description:
      - The containerd program (name on E(PATH) or absolute path), run as C(containerd --version) and
        C(containerd --config FILE config dump).
      - On k3s and RKE2 a name is not looked up on E(PATH); their embedded binary is used
        (C(<data dir>/data/current/bin/containerd), C(<data dir>/bin/containerd)), and without it the validation is
        skipped.
    type: str
    default: containerd
  validate:
    description:
      - Run C(containerd config dump) before and after the change. When containerd is not installed (k3s and RKE2
        embed theirs) the validation is skipped and RV(validated) is false.
    type: bool
    default: true
  rancher_data_dir:
    description:
      - The data directory of k3s or RKE2 (their C(--data-dir)); default C(/var/lib/rancher/k3s) or
        C(/var/lib/rancher/rke2). Needs O(flavor=k3s) or O(flavor=rke2).
    type: path
  rancher_config_dir:
    description:
      - The directory of k3s's or RKE2's C(config.yaml); default C(/etc/rancher/k3s) or C(/etc/rancher/rke2).
    type: path
  restart_marker:
    description:
      - The file whose presence records that a changed config still waits for a restart of RV(service).
    type: path
    default: /var/lib/gpuops/containerd-restart-pending
  timeout:
    description: Seconds each C(containerd) command may run (under coreutils C(timeout) when present).
    type: int
    default: 60
notes:
  - A main config without C(version) (version 1) is refused, as it cannot import a drop-in. Migrate it first.
  - The copied CRI table freezes the main config's CRI settings into the drop-in; after editing the main config's
    CRI table, run this module again.
seealso:
  - name: nvidia-ctk runtime configure
    description: The NVIDIA Container Toolkit's containerd configuration, whose output this module reproduces.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
  - module: gpuops.nvidia.cdi_spec
"""

EXAMPLES = r"""
- name: Add the nvidia runtime and enable CDI (restart left to the caller)
  gpuops.nvidia.containerd_nvidia_runtime:
  register: containerd_nvidia

- name: Restart containerd when the config changed and the node is drained
  ansible.builtin.systemd_service:
    name: "{{ containerd_nvidia.service }}"
    state: restarted
  when: containerd_nvidia.restart_pending

- name: Make nvidia the default runtime, with the GPU Operator's three runtimes
  gpuops.nvidia.containerd_nvidia_runtime:
    set_as_default: true
    runtimes:
      - {name: nvidia, binary: /usr/bin/nvidia-container-runtime}
      - {name: nvidia-cdi, binary: /usr/bin/nvidia-container-runtime.cdi}
      - {name: nvidia-legacy, binary: /usr/bin/nvidia-container-runtime.legacy}
"""

RETURN = r"""
flavor:
  description: The containerd configured.
  returned: always
  type: str
  sample: containerd
containerd_version:
  description: The containerd version the schema was chosen for; null on k3s/RKE2 without a containerd binary.
  returned: always
  type: str
  sample: 1.7.27
config_version:
  description: The containerd config version of the drop-in.
  returned: always
  type: int
  sample: 2
cri_plugin:
  description: The CRI plugin table the runtimes are in.
  returned: always
  type: str
  sample: io.containerd.grpc.v1.cri
config_path:
  description: The main config (on k3s and RKE2 the generated one, read only).
  returned: always
  type: str
  sample: /etc/containerd/config.toml
drop_in_path:
  description: The drop-in written; null when k3s or RKE2 import none (then RV(flags_path) is used).
  returned: always
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
flags_path:
  description: The k3s/RKE2 C(config.yaml.d) file managed when their containerd imports no drop-in; else null.
  returned: always
  type: str
  sample: /etc/rancher/k3s/config.yaml.d/99-gpuops-nvidia.yaml
files_changed:
  description: The files written (or that would be written in check mode).
  returned: always
  type: list
  elements: str
  sample: ["/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.toml"]
cdi_enabled:
  description: Whether the configuration written enables CDI.
  returned: always
  type: bool
  sample: true
validated:
  description: Whether C(containerd config dump) accepted the result and showed the runtimes.
  returned: always
  type: bool
  sample: true
restart_pending:
  description: Whether a changed config waits for a restart of RV(service) (the marker file exists, or would).
  returned: always
  type: bool
  sample: true
service:
  description: The systemd unit whose restart applies the config (C(containerd), C(k3s), C(k3s-agent),
    C(rke2-server) or C(rke2-agent)).
  returned: always
  type: str
  sample: containerd
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import files as _host_files
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.host import toml as _toml
from ansible_collections.gpuops.nvidia.plugins.module_utils.host import containerd_config as cc
from ansible_collections.gpuops.nvidia.plugins.module_utils.host import rancher as _rancher

_DUMP_ERROR_CHARS = 2000


def _read(module, path):
    """The file's text, or None when it does not exist."""
    try:
        return _host_files.read_text(path, strict=True)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(exc)))
    except UnicodeDecodeError:
        module.fail_json(msg="%s is not UTF-8 text" % path)


def _parse(module, path, text):
    try:
        return _toml.loads(text or "")
    except _toml.TOMLError as exc:
        module.fail_json(msg="%s is not valid TOML (%s); nothing changed" % (path, to_native(exc)))


class _Containerd:
    """The containerd binary: version and config dump, or None when absent."""

    def __init__(self, module, runner, embedded=()):
        """embedded: the binaries k3s/RKE2 ship, used unless an absolute path is given, never one on PATH (the
        distribution's containerd may be another release than theirs and would misjudge their config)."""
        self.module = module
        self.runner = runner
        program = module.params["containerd"]
        if os.path.isabs(program):
            candidates = [program]
        elif embedded:
            candidates = list(embedded)
        else:
            candidates = [runner.find(program)]
        self.binary = next((path for path in candidates if path and os.access(path, os.X_OK)), None)

    def version(self):
        result = self.runner.run([self.binary, "--version"])
        if result.rc != 0:
            self.module.fail_json(msg="containerd --version failed (rc %d): %s" % (result.rc, result.stderr.strip()))
        try:
            return cc.parse_containerd_version(result.stdout)
        except cc.ContainerdConfigError as exc:
            self.module.fail_json(msg=to_native(exc))

    def dump(self, config_path):
        """(parsed dump, None) or (None, error text)."""
        argv = [self.binary, "--config", config_path, "config", "dump"]
        result = self.runner.run(argv)
        if result.rc != 0:
            return None, (result.stderr.strip() or result.stdout.strip())[-_DUMP_ERROR_CHARS:]
        try:
            return _toml.loads(result.stdout), None
        except _toml.TOMLError as exc:
            return None, "unreadable dump: %s" % to_native(exc)


def _runtimes(module):
    runtimes = [(item["name"], item["binary"]) for item in module.params["runtimes"]]
    names = [name for name, _binary in runtimes]
    if not runtimes:
        module.fail_json(msg="runtimes must name at least one runtime")
    if len(set(names)) != len(names):
        module.fail_json(msg="runtimes has duplicate names: %s" % ", ".join(names))
    for name in names:
        if not name or not all(char.isalnum() or char in "-_." for char in name):
            module.fail_json(msg="runtime name %r: use letters, digits, '-', '_' or '.'" % name)
    return runtimes


class _Plan:
    """The files to write: {path: (old text or None, new text or None to remove)}."""

    def __init__(self):
        self.files = {}

    def want(self, path, old, new):
        if old != new:
            self.files[path] = (old, new)

    def diff(self):
        return [{"before_header": path, "after_header": path, "before": old or "", "after": new or ""}
                for path, (old, new) in sorted(self.files.items())]

    def apply(self):
        # In the order wanted: the drop-in before the main config that imports it.
        for path, (_old, new) in self.files.items():
            _put(path, new)

    def undo(self):
        for path, (old, _new) in self.files.items():
            _put(path, old)


def _put(path, text):
    if text is None:
        if os.path.lexists(path):
            os.unlink(path)
    else:
        _host_files.write_atomic(path, to_bytes(text))


def _configure_containerd(module, result, runtimes, containerd):
    params = module.params
    config_path, drop_in_path = params["config_path"], params["drop_in_path"]
    if os.path.dirname(drop_in_path) == os.path.dirname(config_path):
        module.fail_json(msg="drop_in_path must be in its own directory: the main config imports every *.toml "
                             "of that directory, %s included" % config_path)
    if containerd.binary is None:
        module.fail_json(msg="%s not found: install containerd first (or set containerd)" % params["containerd"])
    version = containerd.version()
    main_text = _read(module, config_path)
    running = _running_config(module, containerd, config_path, main_text)
    main = _parse(module, config_path, main_text)
    plan = _Plan()
    try:
        config_version = cc.choose_config_version(version, main)
        main = cc.with_built_in_runtimes(main, running, config_version)
        drop_in = _render(module, main, config_version, version, runtimes, result)
        new_main, _changed = cc.add_import(main_text or "", config_version, drop_in_path)
    except cc.ContainerdConfigError as exc:
        module.fail_json(msg="%s: %s; nothing changed" % (config_path, to_native(exc)))
    plan.want(drop_in_path, _read(module, drop_in_path), _toml.dumps(drop_in))
    plan.want(config_path, main_text, new_main)
    result.update(containerd_version=".".join(str(part) for part in version), config_version=config_version,
                  cri_plugin=cc.cri_plugin_name(config_version), config_path=config_path,
                  drop_in_path=drop_in_path, service="containerd")
    return plan, config_path, containerd.binary is not None


def _running_config(module, containerd, config_path, main_text):
    """What containerd makes of its configuration today (parsed), for the runtimes the drop-in must repeat:
    `config dump` of the main config, or `config default` where there is none (containerd then runs on its
    defaults). A dump that fails fails the task when validating, before anything changes."""
    if main_text is None:
        result = containerd.runner.run([containerd.binary, "config", "default"])
        if result.rc == 0:
            try:
                return _toml.loads(result.stdout)
            except _toml.TOMLError:
                pass
        module.warn("containerd config default failed: the drop-in repeats only the runtimes the main config names")
        return None
    dump, error = containerd.dump(config_path)
    if error is not None:
        if module.params["validate"]:
            module.fail_json(msg="containerd config dump of %s failed before the change, nothing changed: %s"
                                 % (config_path, error))
        module.warn("containerd config dump of %s failed (%s): the drop-in repeats only the runtimes the main "
                    "config names" % (config_path, error))
    return dump


def _render(module, main, config_version, containerd_version, runtimes, result):
    params = module.params
    enable_cdi = params["enable_cdi"]
    if (enable_cdi or params["cdi_spec_dirs"]) and not cc.cdi_supported(containerd_version):
        module.warn("containerd %s has no CDI support (1.7 or later needed): only the legacy runtime path is "
                    "configured" % ".".join(str(part) for part in containerd_version))
        enable_cdi = False
        spec_dirs = []
    else:
        spec_dirs = params["cdi_spec_dirs"]
    result["cdi_enabled"] = bool(enable_cdi)
    return cc.render_drop_in(main, config_version, runtimes, params["set_as_default"], enable_cdi, spec_dirs)


def _configure_rancher(module, result, flavor, runtimes, containerd):
    params = module.params
    layout = _rancher.layout(flavor, params["rancher_data_dir"], params["rancher_config_dir"])
    config_path = layout["generated_config"]
    generated = _parse(module, config_path, _read(module, config_path))
    version = containerd.version() if containerd.binary else None
    config_version = generated.get("version") or 2
    assumed_version = version or _rancher.containerd_version_for(config_version)
    drop_in_path = _rancher.imported_drop_in(generated, layout)
    plan = _Plan()
    result.update(containerd_version=".".join(str(part) for part in version) if version else None,
                  config_version=config_version, cri_plugin=cc.cri_plugin_name(config_version),
                  config_path=config_path, service=_rancher.service(flavor, os.path.exists))
    if drop_in_path:
        try:
            drop_in = _render(module, generated, config_version, assumed_version, runtimes, result)
        except cc.ContainerdConfigError as exc:
            module.fail_json(msg="%s: %s; nothing changed" % (config_path, to_native(exc)))
        plan.want(drop_in_path, _read(module, drop_in_path), _toml.dumps(drop_in))
        result["drop_in_path"] = drop_in_path
    else:
        if (params["enable_cdi"] and not cc.cdi_supported(assumed_version)) or params["cdi_spec_dirs"]:
            module.warn("%s's containerd imports no drop-in directory: enable_cdi and cdi_spec_dirs cannot be set "
                        "without editing its config.toml.tmpl (upgrade %s for config-v3.toml.d support)"
                        % (flavor, flavor))
        result["cdi_enabled"] = cc.cdi_supported(assumed_version)
        flags_path = layout["flags_file"]
        flags = _rancher.flags_text(runtimes[0][0]) if params["set_as_default"] else None
        plan.want(flags_path, _read(module, flags_path), flags)
        result["flags_path"] = flags_path
    return plan, config_path, drop_in_path is not None and containerd.binary is not None


def _validate_after(module, containerd, config_path, plan, runtimes, result):
    dump, error = containerd.dump(config_path)
    problems = [error] if error is not None else cc.runtime_problems(
        dump, result["config_version"], runtimes, result["cdi_enabled"], module.params["set_as_default"])
    if problems:
        plan.undo()
        restored = "so the previous files were restored" if plan.files else "nothing was changed"
        module.fail_json(msg="containerd config dump of %s does not show the configuration asked for, %s: %s"
                             % (config_path, restored, "; ".join(problems)), **result)
    result["validated"] = True


def _flavor(module):
    flavor = module.params["flavor"]
    if flavor != "auto":
        return flavor
    if module.params["rancher_data_dir"]:
        module.fail_json(msg="rancher_data_dir needs flavor k3s or rke2: the data dir does not say which")
    for candidate in ("rke2", "k3s"):
        if os.path.exists(_rancher.layout(candidate)["generated_config"]):
            return candidate
    return "containerd"


def main():
    runtime_spec = {"name": {"type": "str", "required": True}, "binary": {"type": "path", "required": True}}
    module = AnsibleModule(
        argument_spec={
            "flavor": {"type": "str", "choices": ["auto", "containerd", "k3s", "rke2"], "default": "auto"},
            "config_path": {"type": "path", "default": "/etc/containerd/config.toml"},
            "drop_in_path": {"type": "path", "default": "/etc/containerd/conf.d/99-nvidia.toml"},
            "runtimes": {"type": "list", "elements": "dict", "options": runtime_spec,
                         "default": [{"name": "nvidia", "binary": "/usr/bin/nvidia-container-runtime"}]},
            "set_as_default": {"type": "bool", "default": False},
            "enable_cdi": {"type": "bool", "default": True},
            "cdi_spec_dirs": {"type": "list", "elements": "path", "default": []},
            "containerd": {"type": "str", "default": "containerd"},
            "validate": {"type": "bool", "default": True},
            "rancher_data_dir": {"type": "path"},
            "rancher_config_dir": {"type": "path"},
            "restart_marker": {"type": "path", "default": "/var/lib/gpuops/containerd-restart-pending"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    runtimes = _runtimes(module)
    flavor = _flavor(module)
    embedded = () if flavor == "containerd" else _rancher.layout(flavor, module.params["rancher_data_dir"])[
        "containerd_binaries"]
    containerd = _Containerd(module, CommandRunner(module, module.params["timeout"]), embedded)
    result = {"changed": False, "flavor": flavor, "drop_in_path": None, "flags_path": None, "files_changed": [],
              "cdi_enabled": False, "validated": False}
    if flavor == "containerd":
        plan, dump_config, can_validate = _configure_containerd(module, result, runtimes, containerd)
    else:
        plan, dump_config, can_validate = _configure_rancher(module, result, flavor, runtimes, containerd)
    can_validate = can_validate and module.params["validate"]
    marker = module.params["restart_marker"]
    result["files_changed"] = sorted(plan.files)
    result["changed"] = bool(plan.files)
    if module._diff:
        result["diff"] = plan.diff()
    if plan.files and not module.check_mode:
        try:
            plan.apply()
        except (IOError, OSError) as exc:
            plan.undo()
            module.fail_json(msg="cannot write the containerd configuration, previous files restored: %s"
                                 % to_native(exc), **result)
        if can_validate:
            _validate_after(module, containerd, dump_config, plan, runtimes, result)
        _host_files.write_atomic(marker, b"config changed; restart %s to apply it\n" % to_bytes(result["service"]),
                                 mode=0o644, dir_mode=0o700)
    elif can_validate and not plan.files:
        _validate_after(module, containerd, dump_config, plan, runtimes, result)
    result["restart_pending"] = os.path.exists(marker) or bool(plan.files)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
