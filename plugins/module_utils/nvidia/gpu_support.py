# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a driver version supports (private to this collection): GPU generation by PCI device id, the kernel
module flavour each generation can run, driver branch windows per generation, and the driver a CUDA version
needs. Pure functions over plain data; used by node_precheck_facts and nvidia_driver_runfile.
"""

from __future__ import annotations

import re

# The one rule for an NVIDIA driver version (is_driver_version): branch.minor[.patch], the branch 100-9999 without
# a leading zero (595.91.07, 470.74, 1000.1.1); [0-9] is ASCII only, so '６15.71.09' is refused.
DRIVER_VERSION_RE = re.compile(r"(?P<branch>[1-9][0-9]{2,3})\.(?P<minor>[0-9]{1,3})(?:\.(?P<patch>[0-9]{1,3}))?")
CUDA_VERSION_RE = re.compile(r"^(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,2})(?:\.[0-9]{1,3})?$")

# PCI device id ranges of NVIDIA GPU chips (inclusive), oldest first. From the device ids of each chip family
# (GK1xx ... GB2xx) as the kernel's nouveau and NVIDIA's supported-GPU lists name them; ids at or above the
# last range are read as Blackwell or newer.
GENERATION_RANGES = (
    (0x0FC0, 0x12FF, "kepler"),
    (0x1340, 0x17FF, "maxwell"),
    (0x15F0, 0x15FF, "pascal"),   # GP100, inside Maxwell's span: checked before it, see generation_of
    (0x1B00, 0x1D7F, "pascal"),
    (0x1D80, 0x1DFF, "volta"),
    (0x1E00, 0x1FFF, "turing"),
    (0x2080, 0x20FF, "ampere"),   # GA100 (A100, A30)
    (0x2180, 0x21FF, "turing"),   # TU116
    (0x2200, 0x25FF, "ampere"),   # GA10x (A10, A40, RTX A6000)
    (0x2300, 0x237F, "hopper"),   # GH100 (H100, H200, GH200)
    (0x2680, 0x28FF, "ada"),      # AD10x (L40S, L4, RTX 6000 Ada)
)
NEWEST_GENERATION = "blackwell"
NEWEST_GENERATION_FIRST_ID = 0x2900
GENERATION_ORDER = ("pre-kepler", "kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper",
                    "blackwell")

# The open kernel modules run on Turing and newer; Blackwell and newer run only on them (from 570). Older
# generations need the proprietary modules.
OPEN_MODULES_FIRST_GENERATION = "turing"
OPEN_MODULES_ONLY_FIRST_GENERATION = "blackwell"
# The branch from which the runfile installs the open modules when not told (560.28.03 switched the default).
OPEN_MODULES_DEFAULT_BRANCH = 560

# Driver branch windows: first branch with production support, last branch that still supports it.
MIN_BRANCH = {"kepler": 304, "maxwell": 340, "pascal": 367, "volta": 384, "turing": 410, "ampere": 450,
              "ada": 525, "hopper": 525, "blackwell": 570}
MAX_BRANCH = {"pre-kepler": 340, "kepler": 470, "maxwell": 580, "pascal": 580, "volta": 580}

# CUDA toolkit -> minimum Linux x86_64 driver (the toolkit release notes' table 3, GA releases).
CUDA_MIN_DRIVER = {
    (11, 0): "450.36.06", (11, 1): "455.23", (11, 2): "460.27.03", (11, 3): "465.19.01", (11, 4): "470.42.01",
    (11, 5): "495.29.05", (11, 6): "510.39.01", (11, 7): "515.43.04", (11, 8): "520.61.05",
    (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03", (12, 3): "545.23.06", (12, 4): "550.54.14",
    (12, 5): "555.42.02", (12, 6): "560.28.03", (12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06",
}
# Minor version compatibility: any toolkit of a major version runs (without newer-driver features) on the
# driver of that major's first release; used for minors the table does not know yet.
CUDA_MAJOR_MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# The oldest generation each CUDA major still compiles for: CUDA 12 dropped Kepler, CUDA 13 dropped Maxwell,
# Pascal and Volta.
CUDA_OLDEST_GENERATION = {11: "kepler", 12: "maxwell", 13: "turing"}


def is_driver_version(value) -> bool:
    """Whether ``value`` is an NVIDIA driver version: a string that is branch.minor[.patch] and nothing else (no
    whitespace, no trailing newline, ASCII digits only). The modules, the roles and the runbooks (through the test
    plugin gpuops.nvidia.nvidia_driver_version) all use this one rule."""
    return isinstance(value, str) and DRIVER_VERSION_RE.fullmatch(value) is not None


def parse_driver_version(text):
    """'580.95.05' -> (580, 95, 5); None when it is not a driver version (is_driver_version; surrounding whitespace
    of text read from a node is ignored)."""
    text = (text or "").strip()
    if not is_driver_version(text):
        return None
    match = DRIVER_VERSION_RE.fullmatch(text)
    return (int(match.group("branch")), int(match.group("minor")), int(match.group("patch") or 0))


def parse_cuda_version(text):
    """'12.4' or '12.4.1' -> (12, 4); None when malformed."""
    match = CUDA_VERSION_RE.match((text or "").strip())
    if not match:
        return None
    return (int(match.group("major")), int(match.group("minor")))


def generation_of(device_id):
    """PCI device id ('0x2330' or 0x2330) -> generation name; 'pre-kepler' below Kepler, None if unreadable."""
    try:
        number = int(device_id, 16) if isinstance(device_id, str) else int(device_id)
    except (TypeError, ValueError):
        return None
    if number >= NEWEST_GENERATION_FIRST_ID:
        return NEWEST_GENERATION
    # narrower ranges listed after wider ones win (GP100 inside the Maxwell span)
    found = None
    for first, last, generation in GENERATION_RANGES:
        if first <= number <= last and (found is None or last - first < found[1] - found[0]):
            found = (first, last, generation)
    if found:
        return found[2]
    return "pre-kepler" if number < GENERATION_RANGES[0][0] else None


def generation_rank(generation):
    return GENERATION_ORDER.index(generation) if generation in GENERATION_ORDER else -1


def supported_module_types(generation):
    """Kernel module flavours a generation runs: ['open'], ['proprietary'] or both (open first)."""
    rank = generation_rank(generation)
    if rank >= generation_rank(OPEN_MODULES_ONLY_FIRST_GENERATION):
        return ["open"]
    if rank >= generation_rank(OPEN_MODULES_FIRST_GENERATION):
        return ["open", "proprietary"]
    return ["proprietary"]


def resolve_module_type(requested, generations, driver_version):
    """The flavour to install: `requested` ('open', 'proprietary' or 'auto') checked against every GPU
    generation of the node. Returns {'module_type', 'reason', 'error'}; 'error' says why no flavour fits."""
    generations = [generation for generation in generations if generation]
    allowed = {"open", "proprietary"}
    for generation in generations:
        allowed &= set(supported_module_types(generation))
    branch = (parse_driver_version(driver_version) or (0,))[0]
    if requested in ("open", "proprietary"):
        if requested in allowed:
            return {"module_type": requested, "reason": "requested", "error": None}
        needs = sorted(set(generations), key=generation_rank)
        return {"module_type": None, "reason": None,
                "error": "the %s kernel modules do not support this node's GPUs (%s): use %s" % (
                    requested, ", ".join(needs), " or ".join(sorted(allowed)) or "one generation per node")}
    if not allowed:
        return {"module_type": None, "reason": None,
                "error": "no kernel module flavour supports every GPU of this node (%s)"
                         % ", ".join(sorted(set(generations), key=generation_rank))}
    if allowed == {"open"}:
        return {"module_type": "open", "reason": "the node's GPUs need the open modules", "error": None}
    if allowed == {"proprietary"}:
        return {"module_type": "proprietary", "reason": "the node's GPUs need the proprietary modules",
                "error": None}
    if branch and branch < OPEN_MODULES_DEFAULT_BRANCH:
        return {"module_type": "proprietary",
                "reason": "branch %d predates the open modules as the default (%d)" % (
                    branch, OPEN_MODULES_DEFAULT_BRANCH),
                "error": None}
    return {"module_type": "open", "reason": "open is NVIDIA's recommendation for Turing and newer", "error": None}


def driver_supports_generation(driver_version, generation):
    """None when the driver's branch supports the generation, else why not."""
    parsed = parse_driver_version(driver_version)
    if parsed is None or generation is None:
        return None
    branch = parsed[0]
    if generation in MIN_BRANCH and branch < MIN_BRANCH[generation]:
        return "%s GPUs need driver branch %d or newer" % (generation.capitalize(), MIN_BRANCH[generation])
    if generation in MAX_BRANCH and branch > MAX_BRANCH[generation]:
        return "branch %d is the last with %s support" % (MAX_BRANCH[generation], generation.capitalize())
    return None


def version_at_least(version, minimum):
    """Dotted numeric comparison ('580.65.06' >= '575.51.03')."""
    def key(text):
        return tuple(int(part) for part in re.findall(r"[0-9]+", text or ""))
    return key(version) >= key(minimum)


def cuda_min_driver(cuda_version):
    """(minimum driver, how it was found) for a CUDA version, or (None, reason) when unknown."""
    parsed = parse_cuda_version(cuda_version)
    if parsed is None:
        return None, "malformed"
    if parsed in CUDA_MIN_DRIVER:
        return CUDA_MIN_DRIVER[parsed], "toolkit table"
    if parsed[0] in CUDA_MAJOR_MIN_DRIVER:
        return CUDA_MAJOR_MIN_DRIVER[parsed[0]], "minor version compatibility of CUDA %d" % parsed[0]
    return None, "unknown CUDA major version %d" % parsed[0]


def cuda_supports_generation(cuda_version, generation):
    """None when the CUDA version still supports the generation, else why not."""
    parsed = parse_cuda_version(cuda_version)
    if parsed is None or generation is None:
        return None
    oldest = CUDA_OLDEST_GENERATION.get(parsed[0])
    if oldest is None and parsed[0] > max(CUDA_OLDEST_GENERATION):
        oldest = CUDA_OLDEST_GENERATION[max(CUDA_OLDEST_GENERATION)]
    if oldest and generation_rank(generation) < generation_rank(oldest):
        return "CUDA %d supports %s and newer GPUs, not %s" % (
            parsed[0], oldest.capitalize(), generation.capitalize())
    return None
