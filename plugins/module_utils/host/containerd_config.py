# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""containerd configuration for the NVIDIA runtime: what `nvidia-ctk runtime configure` writes, as pure functions.

The drop-in (`/etc/containerd/conf.d/99-nvidia.toml`) starts from a copy of the main config's CRI plugin table,
because containerd 1.6/1.7 replace a whole `plugins.<id>` table from an imported file (per-section merging came
with 2.0): without the copy, the user's CRI settings (CNI dirs, sandbox image, runc options) would vanish. Each
NVIDIA runtime copies the options of the low-level runtime (the non-NVIDIA default, else runc, else crun), as
nvidia-ctk does, so `SystemdCgroup` and friends carry over. The main config only gains an `imports` entry,
edited in its text so the user's comments and layout stay.
"""

from __future__ import annotations

import copy
import fnmatch
import posixpath
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import toml as _toml

CRI_PLUGIN_V2 = "io.containerd.grpc.v1.cri"
CRI_PLUGIN_V3 = "io.containerd.cri.v1.runtime"
RUNC_V2 = "io.containerd.runc.v2"
LOW_LEVEL_RUNTIMES = ("runc", "crun")
# containerd adds per-version config keys: 3 from 2.0, 4 from 2.3 (the CRI plugin names did not change in 4).
_CONFIG_VERSIONS_FROM = ((4, (2, 3)), (3, (2, 0)), (2, (1, 0)))
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


class ContainerdConfigError(ValueError):
    """A configuration this role must not touch, with the reason and the remedy."""


def parse_containerd_version(text):
    """(major, minor, patch) from `containerd --version` (e.g. '... 1.6.20~ds1 1.6.20~ds1-1+deb12u3')."""
    fields = (text or "").split()
    candidates = fields[2:3] + fields
    for field in candidates:
        match = _VERSION.match(field)
        if match:
            return tuple(int(part) for part in match.groups())
    raise ContainerdConfigError("cannot read the containerd version from %r" % (text or "").strip())


def cdi_supported(containerd_version):
    """CDI (enable_cdi, cdi_spec_dirs) exists from containerd 1.7."""
    return tuple(containerd_version[:2]) >= (1, 7)


def highest_config_version(containerd_version):
    for config_version, since in _CONFIG_VERSIONS_FROM:
        if tuple(containerd_version[:2]) >= since:
            return config_version
    return 2


def choose_config_version(containerd_version, main_config):
    """The config version of the drop-in: the main config's own, or the native one of a new containerd install.

    A main config without `version` is a version 1 config (containerd reads it so), which nvidia-ctk edits in
    place instead of adding a drop-in; this module refuses it rather than rewrite the user's file.
    """
    native = 2 if containerd_version[0] < 2 else 3
    if not main_config:
        return native
    declared = main_config.get("version")
    if declared is None or declared == 1:
        raise ContainerdConfigError(
            "the containerd config has no 'version = 2' (or 3): it is a version 1 config, which cannot import a "
            "drop-in; migrate it first ('containerd config migrate' on 2.x, or add 'version = 2' and rename the "
            "'cri' plugin to 'io.containerd.grpc.v1.cri' on 1.x)")
    if not isinstance(declared, int) or declared < 1:
        raise ContainerdConfigError("the containerd config has an invalid version %r" % (declared,))
    highest = highest_config_version(containerd_version)
    if declared > highest:
        raise ContainerdConfigError(
            "the containerd config says version = %d but containerd %s reads at most version %d: it would not "
            "start with this file" % (declared, ".".join(str(part) for part in containerd_version), highest))
    return declared


def cri_plugin_name(config_version):
    return CRI_PLUGIN_V2 if config_version == 2 else CRI_PLUGIN_V3


def _runtimes_table(cri):
    return cri.setdefault("containerd", {}).setdefault("runtimes", {})


def _low_level_runtimes(cri):
    default = cri.get("containerd", {}).get("default_runtime_name", "")
    names = [default] if isinstance(default, str) and default and not default.startswith("nvidia") else []
    return names + list(LOW_LEVEL_RUNTIMES)


def add_runtime(cri, name, binary, set_as_default, runtime_type=RUNC_V2):
    """Add one NVIDIA runtime to a CRI plugin table in place, as nvidia-ctk's containerd AddRuntime does."""
    runtimes = _runtimes_table(cri)
    for low_level in _low_level_runtimes(cri):
        if isinstance(runtimes.get(low_level), dict):
            runtimes[name] = copy.deepcopy(runtimes[low_level])
            break
    else:
        if name not in runtimes:
            runtimes[name] = {"runtime_type": runtime_type, "runtime_root": "", "runtime_engine": "",
                              "privileged_without_host_devices": False}
    runtimes[name].setdefault("options", {})["BinaryName"] = binary
    if set_as_default:
        cri["containerd"]["default_runtime_name"] = name


def with_built_in_runtimes(main_config, dump, config_version):
    """The main config with the CRI runtimes the drop-in must repeat from `containerd config dump` (a copy).

    containerd 1.x decodes a config's `runtimes` table over its built-in one as a whole: a drop-in that names only
    the NVIDIA runtimes drops the built-in `runc` while `default_runtime_name` stays `runc`, and the CRI plugin does
    not load ("no corresponding runtime configured in `containerd.runtimes`", recorded with Debian 12's 1.6.20).
    So the default runtime, `runc` and `crun` of the running configuration, where the main file does not name them,
    are taken from the dump (nvidia-ctk reads the dump for the same reason). A dump in another schema than the
    drop-in's (containerd 2.x migrating a version 2 file) is not used: 2.x merges the runtimes tables.
    """
    if not isinstance(dump, dict) or dump.get("version") != config_version:
        return main_config
    plugin = cri_plugin_name(config_version)
    dumped_cri = (dump.get("plugins") or {}).get(plugin) or {}
    dumped_runtimes = (dumped_cri.get("containerd") or {}).get("runtimes") or {}
    completed = copy.deepcopy(main_config or {})
    cri = completed.setdefault("plugins", {}).setdefault(plugin, {})
    if not isinstance(cri, dict):
        raise ContainerdConfigError("plugins.%s of the containerd config is not a table" % plugin)
    runtimes = _runtimes_table(cri)
    for name in _low_level_runtimes(dumped_cri):
        if name not in runtimes and isinstance(dumped_runtimes.get(name), dict):
            runtimes[name] = copy.deepcopy(dumped_runtimes[name])
    return completed


def render_drop_in(main_config, config_version, runtimes, set_as_default=False, enable_cdi=False,
                   cdi_spec_dirs=None):
    """The drop-in document: version, the copied CRI table, the NVIDIA runtimes and the CDI keys.

    runtimes: [(name, binary path)], the first one is made the default when set_as_default.
    cdi_spec_dirs: written only when given (nvidia-ctk never writes it; containerd's default is
    ['/etc/cdi', '/var/run/cdi']).
    """
    if not runtimes:
        raise ContainerdConfigError("at least one NVIDIA runtime is needed")
    plugin = cri_plugin_name(config_version)
    source = ((main_config or {}).get("plugins") or {}).get(plugin) or {}
    if not isinstance(source, dict):
        raise ContainerdConfigError("plugins.%s of the containerd config is not a table" % plugin)
    cri = copy.deepcopy(source)
    for index, (name, binary) in enumerate(runtimes):
        add_runtime(cri, name, binary, set_as_default and index == 0)
        if config_version >= 3:
            # Version 3 has no runtime_engine/runtime_root: containerd 2.1.9 logs 'Ignoring unknown key' for them
            # (recorded with the real binary); drop the empty ones the new-runtime fallback adds.
            for key in ("runtime_engine", "runtime_root"):
                if _runtimes_table(cri)[name].get(key) == "":
                    del _runtimes_table(cri)[name][key]
    if enable_cdi:
        cri["enable_cdi"] = True
    if cdi_spec_dirs:
        cri["cdi_spec_dirs"] = list(cdi_spec_dirs)
    return {"version": config_version, "plugins": {plugin: cri}}


def imports_glob(drop_in_path):
    """What the main config must import for the drop-in to load: '<drop-in dir>/*.toml' (nvidia-ctk's entry)."""
    return posixpath.join(posixpath.dirname(drop_in_path), "*.toml")


def is_imported(imports, drop_in_path):
    """Whether one of the imports entries (paths or globs) matches the drop-in."""
    return any(isinstance(entry, str) and (entry == drop_in_path or fnmatch.fnmatchcase(drop_in_path, entry))
               for entry in imports or [])


_TABLE_HEADER = re.compile(r"[ \t]*\[")
_IMPORTS_KEY = re.compile(r"[ \t]*imports[ \t]*=[ \t]*")


def _root_lines(text):
    """(offset, line) of the lines before the first table header: the root table of the document."""
    offset = 0
    for line in text.splitlines(True):
        if _TABLE_HEADER.match(line):
            return
        yield offset, line
        offset += len(line)


def add_import(text, config_version, drop_in_path):
    """The main config text with the drop-in imported; (new text, changed).

    A missing or empty file becomes `imports` + `version` (what nvidia-ctk writes). Otherwise only the root
    `imports` array is extended (or a new `imports` line inserted before the first key), so the user's comments,
    order and formatting stay; the result is parsed back and must equal the old document plus the import.
    """
    glob = imports_glob(drop_in_path)
    if not (text or "").strip():
        return _toml.dumps({"imports": [glob], "version": config_version}), True
    before = _toml.loads(text)
    imports = before.get("imports", [])
    if not isinstance(imports, list):
        raise ContainerdConfigError("'imports' of the containerd config is not an array")
    if is_imported(imports, drop_in_path):
        return text, False
    new_text = None
    for offset, line in _root_lines(text):
        match = _IMPORTS_KEY.match(line)
        if match:
            start = offset + match.end()
            end = _toml.value_end(text, start)
            new_text = text[:start] + _toml.format_value(imports + [glob]) + text[end:]
            break
    if new_text is None:
        if not text.endswith("\n"):
            text += "\n"
        insert_at = None
        root_end = 0
        for offset, line in _root_lines(text):
            root_end = offset + len(line)
            stripped = line.strip()
            if insert_at is None and stripped and not stripped.startswith("#"):
                insert_at = offset
        insert_at = root_end if insert_at is None else insert_at
        new_text = text[:insert_at] + "imports = %s\n" % _toml.format_value([glob]) + text[insert_at:]
    expected = dict(before, imports=imports + [glob])
    if _toml.loads(new_text) != expected:
        raise ContainerdConfigError("adding the import changed more than 'imports'; edit the config by hand")
    return new_text, True


def runtime_problems(dump, config_version, runtimes, enable_cdi, set_as_default):
    """What `containerd config dump` (parsed) shows missing from the configuration asked for; [] when all there.

    The dump is in the schema of the binary that made it, not of the files it read: containerd 2.x migrates a
    version 2 config (Debian's package ships one) and dumps version 3 (4 from 2.3), CRI under its new plugin name.
    """
    dumped = (dump or {}).get("version")
    plugin = cri_plugin_name(dumped if isinstance(dumped, int) and dumped > config_version else config_version)
    cri = ((dump or {}).get("plugins") or {}).get(plugin) or {}
    problems = []
    present = (cri.get("containerd") or {}).get("runtimes") or {}
    for name, binary in runtimes:
        found = ((present.get(name) or {}).get("options") or {}).get("BinaryName")
        if found != binary:
            problems.append("runtime %s: BinaryName is %r, expected %r" % (name, found, binary))
    if enable_cdi and cri.get("enable_cdi") is not True:
        problems.append("enable_cdi is not true in plugins.%s" % plugin)
    default = (cri.get("containerd") or {}).get("default_runtime_name")
    if set_as_default and default != runtimes[0][0]:
        problems.append("default_runtime_name is not %s" % runtimes[0][0])
    if cri and default not in present:
        problems.append("default_runtime_name %s has no entry in plugins.%s's runtimes: the CRI plugin would not "
                        "load" % (default, plugin))
    return problems
