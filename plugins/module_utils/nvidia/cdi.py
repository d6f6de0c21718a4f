# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure CDI (Container Device Interface) spec logic for gpuops.nvidia.cdi_spec.

No AnsibleModule and no I/O here (existence checks take a callable), so the unit tests feed fixtures
straight in. The rules follow the reference Go library, cncf-tags/container-device-interface
(specs-go/config.go, specs-go/version.go, api/producer/validator-default.go, pkg/cdi/container-edits.go,
pkg/parser/parser.go); docs/cdi_spec.md lists each rule and where it comes from.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import cdi_schema as _cdi_schema
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.jsonschema import Validator, format_path

try:
    import yaml

    HAS_YAML = True
except ImportError:  # PyYAML is not guaranteed on targets
    yaml = None
    HAS_YAML = False

DEFAULT_KIND = "nvidia.com/gpu"

# Released CDI spec versions, oldest first (specs-go/version.go). 0.1.0 and 0.2.0 are accepted when read
# but nothing is computed below 0.3.0, the earliest version the library writes.
KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST_VERSION = "0.3.0"
LATEST_VERSION = "1.1.0"

# The six OCI hook names (pkg/cdi/container-edits.go validHookNames).
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
DEVICE_NODE_TYPES = ("", "b", "c", "u", "p")

# Every field the Go structs know (specs-go/config.go). sigs.k8s.io/yaml UnmarshalStrict rejects any other.
# Values: the Go type, checked here only where the JSON schema does not already check it.
STRUCT_FIELDS = {
    "Spec": {"cdiVersion": "string", "kind": "string", "annotations": "map", "devices": ["Device"],
             "containerEdits": "ContainerEdits"},
    "Device": {"name": "string", "annotations": "map", "containerEdits": "ContainerEdits"},
    "ContainerEdits": {"env": ["string"], "deviceNodes": ["DeviceNode"], "netDevices": ["LinuxNetDevice"],
                       "hooks": ["Hook"], "mounts": ["Mount"], "intelRdt": "IntelRdt", "additionalGids": ["uint32"]},
    "DeviceNode": {"path": "string", "hostPath": "string", "type": "string", "major": "int64", "minor": "int64",
                   "fileMode": "uint32", "permissions": "string", "uid": "uint32", "gid": "uint32"},
    "Mount": {"hostPath": "string", "containerPath": "string", "options": ["string"], "type": "string"},
    "Hook": {"hookName": "string", "path": "string", "args": ["string"], "env": ["string"], "timeout": "int64"},
    # enableCMT/enableMBM exist up to spec 1.0.x; 1.1.0 replaced them with schemata/enableMonitoring.
    "IntelRdt": {"closID": "string", "l3CacheSchema": "string", "memBwSchema": "string", "schemata": ["string"],
                 "enableMonitoring": "bool", "enableCMT": "bool", "enableMBM": "bool"},
    "LinuxNetDevice": {"hostInterfaceName": "string", "name": "string"},
}

_INT_RANGES = {"int64": (-(2 ** 63), 2 ** 63 - 1), "uint32": (0, 2 ** 32 - 1)}

# nvidia-caps minors as the driver lays them out in /proc/driver/nvidia-caps/mig-minors:
# 1 = config, 2 = monitor, then per GPU minor 15 GPU instances x (1 access + 8 compute instances).
_MIG_CAP_BASE = 3
_MIG_CAPS_PER_GI = 9
_MIG_GIS_PER_GPU = 15
# Control nodes every container needs, put in the spec-level edits when the facts list them.
CONTROL_DEVICE_NODES = ("/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")


class CDIError(Exception):
    """Input that cannot become a valid CDI spec; the message names the field."""


class YAMLUnavailableError(CDIError):
    """A YAML document that is not plain JSON, on a host without PyYAML."""


# --------------------------------------------------------------------------------------------- versions


def version_key(version):
    """Sort key of a version string such as '0.7.0' or 'v1.1.0'."""
    return tuple(int(part) for part in normalize_version(version).split("."))


def normalize_version(version):
    """Drop the optional leading 'v' the Go library accepts ('v0.6.0' -> '0.6.0')."""
    return version[1:] if isinstance(version, str) and version.startswith("v") else version


def is_known_version(version):
    return normalize_version(version) in KNOWN_VERSIONS


def _edits_with_paths(spec):
    """Yield (path prefix, containerEdits dict) for the spec-level edits and each device's edits."""
    edits = spec.get("containerEdits")
    if isinstance(edits, dict):
        yield ["containerEdits"], edits
    for index, device in enumerate(_as_list(spec.get("devices"))):
        if isinstance(device, dict) and isinstance(device.get("containerEdits"), dict):
            yield ["devices", index, "containerEdits"], device["containerEdits"]


def _as_list(value):
    return value if isinstance(value, list) else []


def _needs_v040(spec):
    found = []
    for prefix, edits in _edits_with_paths(spec):
        for index, mount in enumerate(_as_list(edits.get("mounts"))):
            if isinstance(mount, dict) and mount.get("type"):
                found.append((prefix + ["mounts", index, "type"], "mount type is set"))
    return found


def _needs_v050(spec):
    found = []
    for index, device in enumerate(_as_list(spec.get("devices"))):
        name = device.get("name") if isinstance(device, dict) else None
        if isinstance(name, str) and name[:1] in tuple("0123456789"):
            found.append((["devices", index, "name"], "device name %r starts with a digit" % name))
    for prefix, edits in _edits_with_paths(spec):
        for index, node in enumerate(_as_list(edits.get("deviceNodes"))):
            if isinstance(node, dict) and node.get("hostPath"):
                found.append((prefix + ["deviceNodes", index, "hostPath"], "device node hostPath is set"))
    return found


def _needs_v060(spec):
    found = []
    if spec.get("annotations"):
        found.append((["annotations"], "spec annotations are set"))
    for index, device in enumerate(_as_list(spec.get("devices"))):
        if isinstance(device, dict) and device.get("annotations"):
            found.append((["devices", index, "annotations"], "device annotations are set"))
    kind = spec.get("kind")
    if isinstance(kind, str) and "/" in kind and "." in kind.split("/", 1)[1]:
        found.append((["kind"], "the class in kind %r contains a dot" % kind))
    return found


def _needs_v070(spec):
    found = []
    for prefix, edits in _edits_with_paths(spec):
        if edits.get("intelRdt") is not None:
            found.append((prefix + ["intelRdt"], "intelRdt is set"))
        if edits.get("additionalGids"):
            found.append((prefix + ["additionalGids"], "additionalGids is set"))
    return found


def _needs_v110(spec):
    found = []
    for prefix, edits in _edits_with_paths(spec):
        rdt = edits.get("intelRdt")
        if isinstance(rdt, dict):
            if rdt.get("schemata") is not None:
                found.append((prefix + ["intelRdt", "schemata"], "intelRdt.schemata is set"))
            if rdt.get("enableMonitoring") is True:
                found.append((prefix + ["intelRdt", "enableMonitoring"], "intelRdt.enableMonitoring is true"))
        if edits.get("netDevices"):
            found.append((prefix + ["netDevices"], "netDevices is set"))
    return found


# (version, what needs it, check) newest first, as specs-go/version.go walks them. 0.8.0 (removal of the Go
# ToOCI helpers) and 1.0.0 (version checks moved into specs-go) changed no field, so nothing requires them.
VERSION_RULES = (
    ("1.1.0", "intelRdt.schemata, intelRdt.enableMonitoring: true, netDevices", _needs_v110),
    ("1.0.0", "nothing (no field changes)", None),
    ("0.8.0", "nothing (no field changes)", None),
    ("0.7.0", "intelRdt, additionalGids (spec or device edits)", _needs_v070),
    ("0.6.0", "annotations (spec or device), a dot in the class part of kind", _needs_v060),
    ("0.5.0", "a device name starting with a digit, deviceNodes[].hostPath", _needs_v050),
    ("0.4.0", "mounts[].type", _needs_v040),
)


def minimum_version(spec):
    """Return (lowest cdiVersion the spec's fields need, [(field path, reason), ...] that force it)."""
    for version, _needs, check in VERSION_RULES:
        reasons = check(spec) if check else []
        if reasons:
            return version, [(format_path(path), reason) for path, reason in reasons]
    return EARLIEST_VERSION, []


# --------------------------------------------------------------------------------------------- validation


def _schema_errors(spec):
    validator = Validator(_cdi_schema.RESOURCES, _cdi_schema.SCHEMA_URI)
    return [(format_path(error.path), error.message) for error in validator.errors(spec)]


def _go_type_error(value, go_type):
    """Message when value cannot be decoded into go_type ('' when it can; null decodes to the zero value)."""
    if value is None:
        return ""
    if isinstance(go_type, list):
        return "" if isinstance(value, list) else "must be a list"
    if go_type in STRUCT_FIELDS:
        return "" if isinstance(value, dict) else "must be a mapping"
    if go_type == "string":
        return "" if isinstance(value, str) else "must be a string"
    if go_type == "map":
        ok = isinstance(value, dict) and all(isinstance(item, str) for item in value.values())
        return "" if ok else "must be a mapping of strings to strings"
    if go_type == "bool":
        return "" if isinstance(value, bool) else "must be a boolean"
    low, high = _INT_RANGES[go_type]
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be an integer"
    return "" if low <= value <= high else "must be between %d and %d" % (low, high)


def _strict_errors(value, go_type, path):
    """(path, message) for each unknown field and each value Go could not decode into its field's type."""
    message = _go_type_error(value, go_type)
    if message:
        return [(format_path(path), message)]
    errors = []
    if isinstance(go_type, list) and isinstance(value, list):
        for index, element in enumerate(value):
            errors.extend(_strict_errors(element, go_type[0], path + [index]))
    elif go_type in STRUCT_FIELDS and isinstance(value, dict):
        fields = STRUCT_FIELDS[go_type]
        for key, item in value.items():
            if key in fields:
                errors.extend(_strict_errors(item, fields[key], path + [key]))
            else:
                errors.append((format_path(path + [key]), "unknown field (known: %s)" % ", ".join(fields)))
    return errors


def _name_error(name, what, allowed_inside, first_must_be_letter):
    """The Go parser's vendor/class/device name rule, as a message ('' when the name is valid)."""
    if not name:
        return "%s must not be empty" % what
    first_ok = name[0].isascii() and (name[0].isalpha() if first_must_be_letter else name[0].isalnum())
    if not first_ok:
        return "%s %r must start with a letter%s" % (what, name, "" if first_must_be_letter else " or digit")
    for char in name[1:-1]:
        if not (char.isascii() and (char.isalnum() or char in allowed_inside)):
            return "%s %r contains %r (allowed: letters, digits and %s)" % (what, name, char, " ".join(allowed_inside))
    if not (name[-1].isascii() and name[-1].isalnum()):
        return "%s %r must end with a letter or digit" % (what, name)
    return ""


def kind_error(kind):
    """Why kind is not '<vendor>/<class>' with valid names ('' when it is)."""
    vendor, sep, device_class = kind.partition("/") if isinstance(kind, str) else ("", "", "")
    if not sep or not vendor or not device_class:
        return "kind %r must have the form vendor.com/class" % kind
    return _name_error(vendor, "vendor", "_-.", True) or _name_error(device_class, "class", "_-.", True)


def device_name_error(name):
    return _name_error(name, "device name", "_-.:", False)


def _env_errors(env, path):
    errors = []
    for index, entry in enumerate(_as_list(env)):
        # Go: strings.IndexByte(v, '=') <= 0, so "=x" (empty key) is as invalid as "x".
        if isinstance(entry, str) and entry.find("=") <= 0:
            errors.append("%s: %s must be KEY=VALUE" % (format_path(path + [index]), json.dumps(entry)))
    return errors


def _device_node_errors(node, path):
    errors = []
    if not node.get("path"):
        errors.append("%s: must not be empty" % format_path(path + ["path"]))
    if node.get("type", "") not in DEVICE_NODE_TYPES:
        errors.append("%s: %r is not a device type (b, c, u or p)" % (format_path(path + ["type"]), node["type"]))
    permissions = node.get("permissions", "")
    if isinstance(permissions, str) and permissions.strip("rwm"):
        errors.append("%s: %r may only contain r, w and m" % (format_path(path + ["permissions"]), permissions))
    return errors


def _hook_errors(hook, path):
    errors = []
    if hook.get("hookName") not in HOOK_NAMES:
        errors.append("%s: %r is not a hook name (%s)"
                      % (format_path(path + ["hookName"]), hook.get("hookName"), ", ".join(HOOK_NAMES)))
    if not hook.get("path"):
        errors.append("%s: must not be empty" % format_path(path + ["path"]))
    errors.extend(_env_errors(hook.get("env"), path + ["env"]))
    return errors


def _mount_errors(mount, path):
    return ["%s: must not be empty" % format_path(path + [key]) for key in ("hostPath", "containerPath")
            if not mount.get(key)]


def _intel_rdt_errors(rdt, path, spec_version):
    errors = []
    clos_id = rdt.get("closID", "")
    # ClosID must be a usable Linux file name; "/" is the root CLOS.
    if clos_id != "/" and (len(clos_id) >= 4096 or clos_id in (".", "..") or "/" in clos_id or "\n" in clos_id):
        errors.append("%s: %r is not a valid CLOS id (a file name, or / for the root CLOS)"
                      % (format_path(path + ["closID"]), clos_id))
    if spec_version and version_key(spec_version) >= version_key("1.1.0"):
        for field in ("enableCMT", "enableMBM"):
            if field in rdt:
                errors.append("%s: not valid for CDI spec version %s (1.1.0 replaced it with enableMonitoring)"
                              % (format_path(path + [field]), spec_version))
    return errors


def _net_device_errors(net_devices, path):
    errors = []
    seen = {"hostInterfaceName": {}, "name": {}}
    for index, device in enumerate(net_devices):
        if not isinstance(device, dict):
            continue
        for key in ("hostInterfaceName", "name"):
            value = device.get(key)
            item_path = format_path(path + [index, key])
            if not value:
                errors.append("%s: must not be empty" % item_path)
            elif value in seen[key]:
                errors.append("%s: %r is already used by %s" % (item_path, value, seen[key][value]))
            else:
                seen[key][value] = format_path(path + [index])
    return errors


def _edits_errors(edits, path, spec_version):
    errors = _env_errors(edits.get("env"), path + ["env"])
    checks = (("deviceNodes", _device_node_errors), ("hooks", _hook_errors), ("mounts", _mount_errors))
    for key, check in checks:
        for index, item in enumerate(_as_list(edits.get(key))):
            if isinstance(item, dict):
                errors.extend(check(item, path + [key, index]))
    if isinstance(edits.get("intelRdt"), dict):
        errors.extend(_intel_rdt_errors(edits["intelRdt"], path + ["intelRdt"], spec_version))
    errors.extend(_net_device_errors(_as_list(edits.get("netDevices")), path + ["netDevices"]))
    return errors


def edits_are_empty(edits):
    """True when device edits would change nothing (invalid for a device, fine at spec level)."""
    if not isinstance(edits, dict):
        return True
    keys = ("env", "deviceNodes", "hooks", "mounts", "additionalGids", "netDevices")
    return not any(edits.get(key) for key in keys) and edits.get("intelRdt") is None


def _device_errors(spec, spec_version):
    errors = []
    first_index = {}
    devices = _as_list(spec.get("devices"))
    if not devices:
        errors.append("devices: must define at least one device")
    for index, device in enumerate(devices):
        path = ["devices", index]
        name = device.get("name", "")
        message = device_name_error(name)
        if message:
            errors.append("%s: %s" % (format_path(path + ["name"]), message))
        elif name in first_index:
            errors.append("%s: device %r is already defined by devices[%d]"
                          % (format_path(path + ["name"]), name, first_index[name]))
        else:
            first_index[name] = index
        edits = device.get("containerEdits")
        if edits_are_empty(edits):
            errors.append("%s: a device needs at least one edit (env, deviceNodes, hooks, mounts, additionalGids, "
                          "intelRdt or netDevices)" % format_path(path + ["containerEdits"]))
        else:
            errors.extend(_edits_errors(edits, path + ["containerEdits"], spec_version))
    return errors


def _version_errors(spec):
    declared = spec.get("cdiVersion")
    if not is_known_version(declared):
        return ["cdiVersion: %r is not a released CDI version (%s)" % (declared, ", ".join(KNOWN_VERSIONS))]
    needed, reasons = minimum_version(spec)
    if version_key(needed) > version_key(declared):
        because = "; ".join("%s: %s" % reason for reason in reasons)
        return ["cdiVersion: %s is lower than %s, which the spec needs (%s)" % (declared, needed, because)]
    return []


def _semantic_errors(spec):
    declared = spec["cdiVersion"]
    spec_version = declared if is_known_version(declared) else None
    errors = _version_errors(spec)
    message = kind_error(spec["kind"])
    if message:
        errors.append("kind: %s" % message)
    if isinstance(spec.get("containerEdits"), dict):
        errors.extend(_edits_errors(spec["containerEdits"], ["containerEdits"], spec_version))
    errors.extend(_device_errors(spec, spec_version))
    return errors


def _already_reported(path, reported):
    """True when the schema already flagged path itself or something inside it."""
    return any(other == path or other.startswith(path + ".") or other.startswith(path + "[") for other in reported)


def validate_spec(spec):
    """Return every reason (field path first) why CDI readers would reject spec; [] when it is valid.

    The JSON schema and the Go field types are checked together (a field both find wrong is reported once,
    in the schema's words); the Go library's semantic rules run only on a spec whose shape is right, so that
    every message can rely on the types.
    """
    if not isinstance(spec, dict):
        return ["(root): a CDI spec must be a mapping, got %s" % type(spec).__name__]
    schema_errors = _schema_errors(spec)
    reported = [path for path, _message in schema_errors]
    shape_errors = schema_errors + [error for error in _strict_errors(spec, "Spec", [])
                                    if not _already_reported(error[0], reported)]
    if shape_errors:
        return ["%s: %s" % error for error in shape_errors]
    return _semantic_errors(spec)


# --------------------------------------------------------------------------------------------- building


def _drop_empty(value):
    """Normal form for comparison: Go omits empty lists/maps/strings and null pointers when it writes."""
    if isinstance(value, dict):
        cleaned = {}
        for key, item in value.items():
            item = _drop_empty(item)
            if item is None or item == [] or item == {} or item == "":
                continue
            cleaned[key] = item
        return cleaned
    if isinstance(value, list):
        return [_drop_empty(item) for item in value]
    return value


def specs_equal(left, right):
    """Compare parsed content, not bytes: key order, formatting and omitted empty fields do not matter."""
    if left is None or right is None:
        return left is right
    return _drop_empty(left) == _drop_empty(right)


def build_spec(kind, devices, container_edits=None, annotations=None, cdi_version=None):
    """Assemble a spec in the Go field order; cdiVersion = the pin, or the minimum the fields need.

    Raises CDIError when a pin is not a released version or is lower than the minimum.
    """
    spec = {"cdiVersion": LATEST_VERSION, "kind": kind}
    if annotations:
        spec["annotations"] = annotations
    spec["devices"] = devices
    if container_edits:
        spec["containerEdits"] = container_edits
    spec["cdiVersion"] = choose_version(spec, cdi_version)
    return spec


def choose_version(spec, pinned=None):
    """The version to write: pinned (checked against the minimum) or the computed minimum."""
    needed, reasons = minimum_version(spec)
    if pinned is None:
        return needed
    if not is_known_version(pinned):
        raise CDIError("cdi_version: %r is not a released CDI version (%s)" % (pinned, ", ".join(KNOWN_VERSIONS)))
    if version_key(pinned) < version_key(needed):
        because = "; ".join("%s: %s" % reason for reason in reasons)
        raise CDIError("cdi_version: %s is lower than %s, which the spec needs (%s)" % (pinned, needed, because))
    return normalize_version(pinned)


def device_names(spec):
    return [device.get("name") for device in _as_list((spec or {}).get("devices")) if isinstance(device, dict)]


def _gpu_minor(gpu):
    # The facts carry no device minor; nvidia-smi indexes and /dev/nvidiaN minors both follow PCI order on
    # the drivers we know, so index N is taken as /dev/nvidiaN (and as gpuN in mig-minors).
    return int(gpu["index"])


def mig_cap_minors(gpu_minor, gpu_instance_id, compute_instance_id):
    """(GPU-instance access minor, compute-instance access minor) under /dev/nvidia-caps."""
    gi_minor = _MIG_CAP_BASE + (gpu_minor * _MIG_GIS_PER_GPU + gpu_instance_id) * _MIG_CAPS_PER_GI
    return gi_minor, gi_minor + 1 + compute_instance_id


def _node_paths_from_facts(facts):
    return [node.get("path") for node in _as_list(facts.get("device_nodes")) if isinstance(node, dict)]


def _require_node(path, known_paths, what):
    if path not in known_paths:
        raise CDIError("facts: %s needs %s, which facts.device_nodes does not list (is the driver loaded?)"
                       % (what, path))


def _mig_devices_from_facts(gpu, gpu_path, known_paths, check_caps):
    devices = []
    for mig_position, mig in enumerate(_as_list(gpu.get("mig_devices"))):
        where = "gpus[index=%s].mig_devices[%d]" % (gpu["index"], mig_position)
        gi_id, ci_id = mig.get("gpu_instance_id"), mig.get("compute_instance_id")
        if gi_id is None or ci_id is None or mig.get("index") is None:
            raise CDIError("facts: %s lacks index, gpu_instance_id or compute_instance_id" % where)
        gi_minor, ci_minor = mig_cap_minors(_gpu_minor(gpu), int(gi_id), int(ci_id))
        paths = [gpu_path, "/dev/nvidia-caps/nvidia-cap%d" % gi_minor, "/dev/nvidia-caps/nvidia-cap%d" % ci_minor]
        if check_caps:
            for path in paths[1:]:
                _require_node(path, known_paths, "MIG device %s" % where)
        edits = {"deviceNodes": [{"path": path} for path in paths]}
        devices.append({"name": "%s:%s" % (gpu["index"], mig["index"]), "containerEdits": edits})
        if mig.get("uuid"):
            devices.append({"name": mig["uuid"], "containerEdits": _copy_edits(edits)})
    return devices


def _copy_edits(edits):
    return json.loads(json.dumps(edits))


def _merged_device(name, devices):
    """The 'all' device: every device node of the other devices, each once, in first-seen order."""
    paths = []
    for device in devices:
        for node in device["containerEdits"]["deviceNodes"]:
            if node["path"] not in paths:
                paths.append(node["path"])
    return {"name": name, "containerEdits": {"deviceNodes": [{"path": path} for path in paths]}}


def devices_from_facts(facts):
    """Build (devices, spec-level containerEdits) from the nvidia_driver facts dict.

    Names follow nvidia-ctk's defaults: the GPU index ("0") and UUID, MIG "<gpu>:<mig>" and MIG UUID, and
    "all". Only device nodes are produced: the facts do not list driver libraries (use nvidia-ctk for those).
    """
    if not isinstance(facts, dict):
        raise CDIError("facts: must be the ansible_facts.nvidia_driver dictionary")
    gpus = [gpu for gpu in _as_list(facts.get("gpus")) if isinstance(gpu, dict)]
    if not gpus:
        raise CDIError("facts: no GPUs in facts.gpus, so there is no device to describe")
    for gpu in gpus:
        if gpu.get("index") is None:
            raise CDIError("facts: a GPU in facts.gpus has no index (uuid %s)" % gpu.get("uuid"))
    known_paths = _node_paths_from_facts(facts)
    check_caps = any(path.startswith("/dev/nvidia-caps/") for path in known_paths if isinstance(path, str))
    devices = []
    for gpu in sorted(gpus, key=_gpu_minor):
        gpu_path = "/dev/nvidia%d" % _gpu_minor(gpu)
        _require_node(gpu_path, known_paths, "GPU %s" % gpu["index"])
        edits = {"deviceNodes": [{"path": gpu_path}]}
        devices.append({"name": str(gpu["index"]), "containerEdits": edits})
        if gpu.get("uuid"):
            devices.append({"name": gpu["uuid"], "containerEdits": _copy_edits(edits)})
        devices.extend(_mig_devices_from_facts(gpu, gpu_path, known_paths, check_caps))
    devices.append(_merged_device("all", devices))
    control_nodes = [{"path": path} for path in CONTROL_DEVICE_NODES if path in known_paths]
    # NVIDIA_VISIBLE_DEVICES=void keeps the legacy nvidia-container-runtime hook from injecting GPUs a
    # second time, as nvidia-ctk's own specs do.
    spec_edits = {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    if control_nodes:
        spec_edits["deviceNodes"] = control_nodes
    return devices, spec_edits


def merge_edits(base, extra):
    """Append extra's lists to base's (the spec-level edits from facts plus the user's container_edits)."""
    merged = _copy_edits(base or {})
    for key, value in (extra or {}).items():
        if isinstance(value, list):
            merged[key] = list(merged.get(key, [])) + [item for item in value if item not in merged.get(key, [])]
        else:
            merged[key] = value
    return merged


# --------------------------------------------------------------------------------------------- staleness


def host_paths(spec):
    """Host files the spec points at: mounts[].hostPath, hooks[].path, deviceNodes[].hostPath (or path)."""
    paths = []
    for _prefix, edits in _edits_with_paths(spec or {}):
        candidates = [mount.get("hostPath") for mount in _as_list(edits.get("mounts")) if isinstance(mount, dict)]
        candidates += [hook.get("path") for hook in _as_list(edits.get("hooks")) if isinstance(hook, dict)]
        candidates += [node.get("hostPath") or node.get("path")
                       for node in _as_list(edits.get("deviceNodes")) if isinstance(node, dict)]
        for path in candidates:
            if isinstance(path, str) and path and path not in paths:
                paths.append(path)
    return paths


def missing_host_paths(spec, exists):
    """The host paths of spec for which exists(path) is false (after a driver upgrade: old .so versions)."""
    return [path for path in host_paths(spec) if not exists(path)]


def duplicate_devices(spec, other_spec):
    """Device names of spec that other_spec (same kind) defines too; CDI then refuses both at resolve time."""
    if not isinstance(other_spec, dict) or other_spec.get("kind") != spec.get("kind"):
        return []
    others = set(name for name in device_names(other_spec) if isinstance(name, str))
    return [name for name in device_names(spec) if name in others]


# --------------------------------------------------------------------------------------------- text


def spec_format(path):
    """'json' or 'yaml' from the file name; CDI's cache only loads *.json and *.yaml (not *.yml)."""
    if path.endswith(".json"):
        return "json"
    if path.endswith(".yaml"):
        return "yaml"
    raise CDIError("path: %s must end in .yaml or .json: CDI runtimes load only those two extensions "
                   "(a .yml file is silently ignored)" % path)


def render(spec, fmt):
    """Text of spec for a .json or .yaml file. Without PyYAML, YAML files get JSON text (valid YAML 1.2)."""
    if fmt == "yaml" and HAS_YAML:
        return yaml.safe_dump(spec, default_flow_style=False, sort_keys=False)
    return json.dumps(spec, indent=2) + "\n"


def parse(text, fmt):
    """Parse spec text; JSON needs nothing, YAML that is not plain JSON needs PyYAML."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if fmt == "json":
            raise CDIError("not valid JSON: %s" % exc)
    if not HAS_YAML:
        raise YAMLUnavailableError("reading this YAML file needs PyYAML (python3-yaml), which is not installed")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CDIError("not valid YAML: %s" % exc)
