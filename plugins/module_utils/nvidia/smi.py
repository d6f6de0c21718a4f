# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure parsers for nvidia-smi output (no I/O, no AnsibleModule).

Private to gpuops.nvidia: other collections must not import this file; its API may change at any time.

Functions:
  parse_query_xml(text)          ``nvidia-smi -q -x`` (nvsmi DTD v11, v12, v13)
  parse_list(text)               ``nvidia-smi -L``
  merge_mig_listing(gpus, listing)
  parse_query_gpu_csv(text)      ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``
  classify_error(output, rc)     what a failing nvidia-smi means
  sysfs_pci_address(bus_id)      ``00000000:00:1E.0`` -> ``0000:00:1e.0`` (the name under /sys/bus/pci/devices)
"""

from __future__ import annotations

import copy
import csv
import re
import xml.etree.ElementTree as ET

# Values nvidia-smi prints when a field has no value on this GPU/driver (XML text and CSV cells).
_MISSING_VALUES = frozenset((
    "",
    "n/a",
    "not supported",
    "not available",
    "not found",
    "unknown error",
    "insufficient permissions",
    "gpu requires reset",
    "gpu is lost",
    "requested functionality has been deprecated",
))

_TRUE_WORDS = frozenset(("enabled", "yes", "active", "on", "true"))
_FALSE_WORDS = frozenset(("disabled", "no", "not active", "off", "false"))

_LEADING_INT_RE = re.compile(r"^\s*(-?\d+)(?:\s|$)")
_LEADING_FLOAT_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)(?:\s|$)")
_XML_START_RE = re.compile(r"<\?xml|<nvidia_smi_log[\s>]")
_PCI_BUS_ID_RE = re.compile(r"^\s*([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])\s*$")


# --------------------------------------------------------------------------- value helpers

def _is_missing(value):
    """True for None and the placeholders nvidia-smi prints instead of a value ("N/A", "[Not Supported]", ...)."""
    if value is None:
        return True
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return True
    return text.lower() in _MISSING_VALUES


def _clean_str(value):
    """The stripped text, or None when nvidia-smi printed a placeholder."""
    if _is_missing(value):
        return None
    return value.strip()


def _to_int(value):
    """Leading integer of "19968 MiB", "27 C", "0"; None for placeholders or anything else."""
    if _is_missing(value):
        return None
    match = _LEADING_INT_RE.match(value)
    return int(match.group(1)) if match else None


def _to_float(value):
    """Leading number of "67.03 W"; None for placeholders or anything else."""
    if _is_missing(value):
        return None
    match = _LEADING_FLOAT_RE.match(value)
    return float(match.group(1)) if match else None


def _to_bool(value):
    """Enabled/Disabled, Yes/No, Active/Not Active -> bool; None for placeholders and unknown words."""
    if _is_missing(value):
        return None
    word = value.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


def sysfs_pci_address(bus_id):
    """NVML bus id ("00000000:00:1E.0") -> sysfs device name ("0000:00:1e.0"); None when it is not one.

    The domain is printed as the kernel names devices ("%04x"): 4 digits, more for domains above 0xffff
    (Intel VMD puts its devices in domains from 0x10000).
    """
    if not bus_id:
        return None
    match = _PCI_BUS_ID_RE.match(bus_id)
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return "%04x:%s:%s.%s" % (int(domain, 16), bus.lower(), device.lower(), function)


# --------------------------------------------------------------------------- nvidia-smi -q -x

def _text(element, path):
    """Text of the child at ``path`` (ElementTree path), None when the child is absent."""
    if element is None:
        return None
    child = element.find(path)
    if child is None:
        return None
    return child.text or ""


def _first_present(element, paths):
    """Text of the first child in ``paths`` that holds a real value (not a placeholder), else None."""
    for path in paths:
        value = _text(element, path)
        if not _is_missing(value):
            return value
    return None


def _xml_document(text):
    """The XML part of the output: nvidia-smi may print warnings before the document."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text or ""
    match = _XML_START_RE.search(text)
    return text[match.start():] if match else text


def _parse_root(text):
    document = _xml_document(text)
    if "<!ENTITY" in document:
        # nvidia-smi never declares entities; refusing them keeps entity expansion attacks out.
        raise ValueError("nvidia-smi -q -x output is not valid XML: entity declarations are not accepted")
    try:
        root = ET.fromstring(document)
    except ET.ParseError as exc:
        raise ValueError("nvidia-smi -q -x output is not valid XML: %s" % exc)
    if root.tag != "nvidia_smi_log":
        raise ValueError("nvidia-smi -q -x output is not valid XML: root element is <%s>, expected <nvidia_smi_log>" % root.tag)
    return root


def _ecc_uncorrectable(counts):
    """Uncorrectable ECC errors in a <volatile> or <aggregate> block, summed over memory kinds.

    v11 (470-era, pre-Ampere layout): ``double_bit/total``. v11/v12 (Ampere+): ``sram_uncorrectable`` +
    ``dram_uncorrectable``. v13: ``sram_uncorrectable_parity`` + ``sram_uncorrectable_secded`` +
    ``dram_uncorrectable``. None when the GPU reports no number at all (ECC unsupported or disabled).
    """
    if counts is None:
        return None
    if counts.find("double_bit") is not None:
        return _to_int(_text(counts, "double_bit/total"))
    sram_total = _to_int(_text(counts, "sram_uncorrectable"))
    if sram_total is None:
        sram_parts = [_to_int(_text(counts, tag)) for tag in ("sram_uncorrectable_parity", "sram_uncorrectable_secded")]
        sram_total = _sum_known(sram_parts)
    return _sum_known([sram_total, _to_int(_text(counts, "dram_uncorrectable"))])


def _sum_known(numbers):
    known = [number for number in numbers if number is not None]
    return sum(known) if known else None


def _any_flag(values):
    """True when any value says yes, False when some say no and none yes, None when none is known."""
    flags = [_to_bool(value) for value in values]
    if True in flags:
        return True
    if False in flags:
        return False
    return None


def _retired_pages_pending(gpu):
    # "pending_retirement" is the current name, "pending_blacklist" the older one; both are still printed.
    retired = gpu.find("retired_pages")
    return _any_flag([_text(retired, "pending_retirement"), _text(retired, "pending_blacklist")])


def _remapped_rows(gpu):
    """(pending, failure) from <remapped_rows>; (None, None) when it says N/A (no row remapper, pre-Ampere)."""
    remapped = gpu.find("remapped_rows")
    if remapped is None or len(remapped) == 0:
        return None, None
    return _to_bool(_text(remapped, "remapped_row_pending")), _to_bool(_text(remapped, "remapped_row_failure"))


def _power_readings(gpu):
    """(draw_w, limit_w): v12/v13 <gpu_power_readings> (v13 has average/instant draws), v11 <power_readings>."""
    for block_tag in ("gpu_power_readings", "power_readings"):
        block = gpu.find(block_tag)
        if block is None:
            continue
        draw_w = _to_float(_first_present(block, ("power_draw", "average_power_draw", "instant_power_draw")))
        limit_w = _to_float(_first_present(block, ("enforced_power_limit", "current_power_limit", "power_limit")))
        return draw_w, limit_w
    return None, None


def _mig_devices(gpu):
    """<mig_devices> entries; its text is "None" (or the element is absent) when MIG is off or unsupported."""
    devices = []
    for mig in gpu.findall("mig_devices/mig_device"):
        devices.append({
            "index": _to_int(_text(mig, "index")),
            "gpu_instance_id": _to_int(_text(mig, "gpu_instance_id")),
            "compute_instance_id": _to_int(_text(mig, "compute_instance_id")),
            "memory_total_mib": _to_int(_text(mig, "fb_memory_usage/total")),
            "profile": None,
            "uuid": None,
        })
    return devices


def _gpu_from_xml(gpu, position):
    remapped_pending, remapped_failure = _remapped_rows(gpu)
    power_draw_w, power_limit_w = _power_readings(gpu)
    ecc_errors = gpu.find("ecc_errors")
    pci_bus_id = _clean_str(_text(gpu, "pci/pci_bus_id")) or _clean_str(gpu.get("id"))
    return {
        "index": position,
        "minor_number": _to_int(_text(gpu, "minor_number")),
        "uuid": _clean_str(_text(gpu, "uuid")),
        "name": _clean_str(_text(gpu, "product_name")),
        "pci_bus_id": pci_bus_id,
        "memory_total_mib": _to_int(_text(gpu, "fb_memory_usage/total")),
        "memory_used_mib": _to_int(_text(gpu, "fb_memory_usage/used")),
        "persistence_mode": _to_bool(_text(gpu, "persistence_mode")),
        "compute_mode": _clean_str(_text(gpu, "compute_mode")),
        "mig_mode_current": _to_bool(_text(gpu, "mig_mode/current_mig")),
        "mig_mode_pending": _to_bool(_text(gpu, "mig_mode/pending_mig")),
        "mig_devices": _mig_devices(gpu),
        "ecc_volatile_uncorrectable": _ecc_uncorrectable(ecc_errors.find("volatile") if ecc_errors is not None else None),
        "ecc_aggregate_uncorrectable": _ecc_uncorrectable(ecc_errors.find("aggregate") if ecc_errors is not None else None),
        "retired_pages_pending": _retired_pages_pending(gpu),
        "remapped_rows_pending": remapped_pending,
        "remapped_rows_failure": remapped_failure,
        "temperature_c": _to_int(_text(gpu, "temperature/gpu_temp")),
        "power_draw_w": power_draw_w,
        "power_limit_w": power_limit_w,
    }


def parse_query_xml(text):
    """Parse ``nvidia-smi -q -x`` into driver/CUDA versions and the facts contract's ``gpus`` entries.

    ``index`` is the position of the <gpu> element (nvidia-smi prints GPUs in NVML index order);
    ``minor_number`` (the N of /dev/nvidiaN) is kept beside it because the two differ on some hosts.
    ``attached_gpus`` is what the document claims; ``gpus`` holds what it actually contains.
    Raises ValueError("nvidia-smi -q -x output is not valid XML: ...") when the text is not such a document.
    """
    root = _parse_root(text)
    return {
        "driver_version": _clean_str(_text(root, "driver_version")),
        "cuda_version": _clean_str(_text(root, "cuda_version")),
        "attached_gpus": _to_int(_text(root, "attached_gpus")),
        "gpus": [_gpu_from_xml(gpu, position) for position, gpu in enumerate(root.findall("gpu"))],
    }


# --------------------------------------------------------------------------- nvidia-smi -L

_LIST_GPU_RE = re.compile(r"^GPU\s+(?P<index>\d+):\s*(?P<name>.*?)\s*(?:\(UUID:\s*(?P<uuid>[^)\s]+)\s*\))?\s*$")
# "  MIG 3g.40gb     Device  0: (UUID: MIG-...)"; also compute-instance profiles ("1c.3g.71gb") and the R450
# form whose UUID is "MIG-GPU-<gpu uuid>/<gi>/<ci>".
_LIST_MIG_RE = re.compile(
    r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<device_id>\d+):\s*(?:\(UUID:\s*(?P<uuid>[^)\s]+)\s*\))?\s*$"
)


def parse_list(text):
    """Parse ``nvidia-smi -L``.

    Returns [{"index", "name", "uuid", "mig_devices": [{"index", "profile", "uuid", "device_id"}]}].
    For MIG devices ``device_id`` is the number printed after "Device" (NVML's MIG device index, the same
    number as <mig_device><index> in the XML) and ``index`` is the position among that GPU's MIG lines.
    Blank lines and lines of any other shape are ignored; a MIG line before any GPU line is dropped.
    """
    gpus = []
    for line in (text or "").splitlines():
        gpu_match = _LIST_GPU_RE.match(line)
        if gpu_match:
            gpus.append({
                "index": int(gpu_match.group("index")),
                "name": gpu_match.group("name") or None,
                "uuid": gpu_match.group("uuid"),
                "mig_devices": [],
            })
            continue
        mig_match = _LIST_MIG_RE.match(line)
        if mig_match and gpus:
            mig_devices = gpus[-1]["mig_devices"]
            mig_devices.append({
                "index": len(mig_devices),
                "profile": mig_match.group("profile"),
                "uuid": mig_match.group("uuid"),
                "device_id": int(mig_match.group("device_id")),
            })
    return gpus


def _listed_gpu_for(gpu, listing_by_uuid, listing_by_index):
    if gpu.get("uuid") and gpu["uuid"] in listing_by_uuid:
        return listing_by_uuid[gpu["uuid"]]
    return listing_by_index.get(gpu.get("index"))


def merge_mig_listing(gpus, listing):
    """Copy of ``gpus`` with each MIG device's ``profile`` and ``uuid`` filled from ``parse_list()`` output.

    GPUs are matched by uuid, falling back to index (masked captures repeat uuids); MIG devices by their
    MIG device index (XML <index> == ``device_id`` of the listing). Devices the listing lacks keep None.
    MIG devices present only in the listing are not invented: the XML stays the source of what exists.
    """
    merged = copy.deepcopy(gpus)
    listing_by_uuid = {}
    for listed in listing:
        listing_by_uuid.setdefault(listed.get("uuid"), listed)
    listing_by_index = dict((listed.get("index"), listed) for listed in listing)
    if len(listing_by_uuid) != len(listing):
        listing_by_uuid = {}  # duplicated (masked) uuids cannot identify a GPU
    for gpu in merged:
        listed_gpu = _listed_gpu_for(gpu, listing_by_uuid, listing_by_index)
        if listed_gpu is None:
            continue
        listed_migs = dict((mig["device_id"], mig) for mig in listed_gpu.get("mig_devices", []))
        for mig in gpu.get("mig_devices", []):
            listed_mig = listed_migs.get(mig.get("index"))
            if listed_mig is not None:
                mig["profile"] = listed_mig["profile"]
                mig["uuid"] = listed_mig["uuid"]
    return merged


# --------------------------------------------------------------------------- --query-gpu CSV

_UNIT_SUFFIX_RE = re.compile(r"\s*\[[^\]]*\]\s*$")


def _field_name(header_cell):
    """'memory.total [MiB]' -> 'memory.total'."""
    return _UNIT_SUFFIX_RE.sub("", header_cell).strip()


def parse_query_gpu_csv(text, fields=None):
    """Parse ``--query-gpu=... --format=csv[,noheader][,nounits]`` into one dict per GPU.

    Keys are the field names without the unit suffix ("memory.total"); values are the printed strings
    (units kept unless ``nounits`` was used) or None for empty cells and placeholders ("[N/A]", "N/A",
    "[Not Supported]", "[Requested functionality has been deprecated]", any other bracketed marker).
    With ``noheader`` output pass the queried ``fields`` (list of names, in query order).
    A short (cut) row yields only the fields it has.
    """
    rows = [row for row in csv.reader((text or "").splitlines(), skipinitialspace=True) if any(cell.strip() for cell in row)]
    if fields is None:
        if not rows:
            return []
        names = [_field_name(cell) for cell in rows[0]]
        rows = rows[1:]
    else:
        names = [_field_name(name) for name in fields]
    return [dict((name, _clean_str(cell)) for name, cell in zip(names, row)) for row in rows]


# --------------------------------------------------------------------------- failures

# (kind, pattern) checked in order; texts from nvidia-smi, NVML and the shell.
_ERROR_PATTERNS = (
    ("version_mismatch", re.compile(r"Driver/library version mismatch|API mismatch", re.I)),
    ("no_driver", re.compile(r"couldn't communicate with the NVIDIA driver|Driver Not Loaded|NVIDIA driver is not loaded", re.I)),
    ("not_found", re.compile(
        r"ERROR_LIBRARY_NOT_FOUND|could not load NVML library|couldn't find libnvidia-ml|libnvidia-ml\.so[.\d]*: cannot open"
        r"|command not found|No such file or directory|\[Errno 2\]",
        re.I,
    )),
)
# nvidia-smi(1) RETURN VALUE: 9 = driver not loaded, 12 = NVML shared library not found or not loadable;
# 127 = the shell's "command not found".
_ERROR_KIND_BY_RC = {9: "no_driver", 12: "not_found", 127: "not_found"}
_NVML_LIBRARY_VERSION_RE = re.compile(r"NVML library version:\s*([0-9][0-9A-Za-z.]*)")


def _meaningful_lines(output):
    return [line.strip() for line in (output or "").splitlines() if line.strip()]


def _matching_kind(lines):
    """(kind, line) of the first known failure text, or (None, None)."""
    for kind, pattern in _ERROR_PATTERNS:
        for line in lines:
            if pattern.search(line):
                return kind, line
    return None, None


def classify_error(output, rc):
    """Say what a nvidia-smi run means: {"error_kind", "error", "nvml_library_version"}.

    error_kind:
      version_mismatch  userspace libraries differ from the loaded kernel module (needs reboot or module reload)
      no_driver         the kernel module is not loaded or does not answer
      not_found         nvidia-smi or libnvidia-ml is missing (rc 127 / ENOENT / rc 12)
      other             any other failure, e.g. "No devices were found" (driver loaded, no GPU answered) or
                        "Unable to determine the device handle for GPU ...: Unknown Error"
      None              rc 0 and no known failure text
    error is the line that names the failure (else the first non-blank line; a short note when a failing
    run printed nothing). Known texts win over the return code, which is only the fallback.
    """
    lines = _meaningful_lines(output)
    version_match = _NVML_LIBRARY_VERSION_RE.search(output or "")
    nvml_library_version = version_match.group(1) if version_match else None
    kind, line = _matching_kind(lines)
    if kind is None and rc != 0:
        kind = _ERROR_KIND_BY_RC.get(rc, "other")
        line = lines[0] if lines else "nvidia-smi exited with return code %s and printed nothing" % rc
    return {"error_kind": kind, "error": line, "nvml_library_version": nvml_library_version}
