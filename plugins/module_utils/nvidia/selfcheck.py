# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure planner of the post-reboot self-check (seed runbook case 7, GPUs gone after a reboot).

From what a node shows at boot (kernel release, ``/proc/modules``, ``modinfo nvidia``, ``mokutil``, ``dkms
status``, ``nvidia-smi -L`` and the MIG layout it should have) it decides the node's verdict and the one repair
worth trying before kubelet starts: ``dkms autoinstall`` when no module is built for a new kernel, ``modprobe
nvidia`` when the module is built but not loaded, nothing for a module signed by a key the firmware does not
trust (the operator enrolls the key at the console) nor for a lost MIG layout (it is re-applied by whoever owns
the layout). The codes are those of ``diagnose`` (``docs/diagnose.md``, case 7).

Standard library only: the ``node_selfcheck`` role installs this file and ``driver_state.py`` beside the node's
self-check program, which imports them without Ansible.
"""

from __future__ import annotations

import re

try:
    from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import (
        common_name,
        normalize_fingerprint,
        nvidia_dkms_entries,
        parse_dkms_status,
        parse_modinfo,
        parse_mok_list,
        parse_module_list,
        parse_sb_state,
    )
except ImportError:  # the copy on a node, installed by the node_selfcheck role beside driver_state.py
    from driver_state import (  # type: ignore[no-redef]
        common_name,
        normalize_fingerprint,
        nvidia_dkms_entries,
        parse_dkms_status,
        parse_modinfo,
        parse_mok_list,
        parse_module_list,
        parse_sb_state,
    )

INSTALLED_DKMS_STATES = ("installed", "installed-weak")
ANNOTATION = "gpuops.nvidia/selfcheck"

_GPU_LINE_RE = re.compile(r"^GPU (?P<index>\d+): ")
_MIG_LINE_RE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+\d+:")


def parse_mig_listing(text):
    """``nvidia-smi -L`` -> {gpu index (str): [MIG profile, ...]} (GPUs without MIG devices map to [])."""
    layout = {}
    current = None
    for line in (text or "").splitlines():
        gpu = _GPU_LINE_RE.match(line)
        if gpu:
            current = gpu.group("index")
            layout[current] = []
            continue
        mig = _MIG_LINE_RE.match(line)
        if mig and current is not None:
            layout[current].append(mig.group("profile"))
    return layout


def node_facts(release, modules_text, modinfo_text, sb_state_text=None, enrolled_text=None, dkms_text=None,
               smi_list_text=None, mig_layout_wanted=None):
    """The texts the self-check gathers -> the facts ``decide`` reads (plain dicts)."""
    loaded = any(module["name"] == "nvidia" for module in parse_module_list(modules_text))
    info = parse_modinfo(modinfo_text)
    secure_boot = parse_sb_state(sb_state_text) if sb_state_text is not None else None
    return {
        "kernel_release": release,
        "module": {
            "loaded": loaded,
            "filename": info.get("filename"),
            "version": info.get("version"),
            "vermagic": info.get("vermagic"),
            "signer": info.get("signer"),
            "sig_key": info.get("sig_key"),
        },
        "secure_boot": (secure_boot or {}).get("enabled"),
        "mok_enrolled": parse_mok_list(enrolled_text) if enrolled_text is not None else None,
        "dkms": nvidia_dkms_entries(parse_dkms_status(dkms_text)) if dkms_text is not None else None,
        "mig_present": parse_mig_listing(smi_list_text) if smi_list_text is not None else None,
        "mig_wanted": {str(gpu): list(profiles) for gpu, profiles in (mig_layout_wanted or {}).items()},
    }


def signer_enrolled(module, enrolled):
    """The module's signer matches an enrolled MOK by certificate CN or by key fingerprint."""
    signer = (module.get("signer") or "").strip()
    sig_key = normalize_fingerprint(module.get("sig_key"))
    for key in enrolled or []:
        if signer and common_name(key.get("subject")) == signer:
            return True
        if sig_key and key.get("fingerprint") == sig_key:
            return True
    return False


def _check(name, ok, detail):
    return {"name": name, "ok": ok, "detail": detail}


def _mig_missing(facts):
    """{gpu: {"wanted": [...], "present": [...]}} for each GPU whose MIG devices differ from the wanted layout."""
    present = facts.get("mig_present")
    if present is None:
        return {}
    missing = {}
    for gpu, wanted in sorted((facts.get("mig_wanted") or {}).items()):
        have = present.get(gpu) or []
        if sorted(have) != sorted(wanted):
            missing[gpu] = {"wanted": wanted, "present": have}
    return missing


def _mig_text(mig_missing):
    return "; ".join("GPU %s has %s, wants %s" % (gpu, ",".join(diff["present"]) or "none", ",".join(diff["wanted"]))
                     for gpu, diff in mig_missing.items())


def decide(facts):
    """The self-check's verdict on ``node_facts``: ``{"status", "code", "checks", "repair", "advice"}``.

    status: ``ok`` | ``repairable`` (``repair`` names the one action, argv included) | ``needs_operator``
    (``advice`` says what to do; nothing is tried). code: the ``diagnose`` code, None when ok.
    """
    release = facts.get("kernel_release")
    module = facts.get("module") or {}
    dkms = facts.get("dkms")
    built_here = [entry for entry in dkms or [] if entry.get("kernel") == release
                  and entry.get("state") in INSTALLED_DKMS_STATES]
    checks = [_check("driver_loaded", bool(module.get("loaded")),
                     "nvidia %s loaded" % module.get("version") if module.get("loaded")
                     else "nvidia is not loaded")]
    if dkms:
        checks.append(_check("dkms_built_for_running_kernel", bool(built_here),
                             "DKMS: %s" % ", ".join("%s/%s %s for %s" % (e["module"], e["version"], e["state"],
                                                                         e.get("kernel") or "no kernel")
                                                    for e in dkms)))
    signature_ok = True
    if facts.get("secure_boot") and module.get("filename") and not module.get("loaded"):
        signature_ok = bool(module.get("signer")) and signer_enrolled(module, facts.get("mok_enrolled"))
        checks.append(_check("module_signed_by_enrolled_key", signature_ok,
                             "%s signed by %s" % (module["filename"], module.get("signer") or "nobody")))
    mig_missing = _mig_missing(facts)
    if facts.get("mig_wanted"):
        checks.append(_check("mig_layout_present", not mig_missing, _mig_text(mig_missing) or "as wanted"))

    def verdict(status, code, advice, repair=None):
        return {"status": status, "code": code, "checks": checks, "repair": repair, "advice": advice}

    if not module.get("loaded"):
        if not module.get("filename"):
            if dkms and not built_here:
                argv = ["dkms", "autoinstall", "-k", release] if release else ["dkms", "autoinstall"]
                return verdict("repairable", "dkms_not_built_for_running_kernel",
                               "No nvidia module is built for the running kernel %s: rebuild it with DKMS, "
                               "then load it." % release,
                               {"action": "dkms_autoinstall", "argv": argv, "then": ["modprobe", "nvidia"]})
            return verdict("needs_operator", "module_not_loaded",
                           "No nvidia module is installed for the running kernel %s and DKMS has nothing to "
                           "build: reinstall the driver for this kernel (role nvidia_driver)." % release)
        if not signature_ok:
            code = "secure_boot_signer_not_enrolled" if module.get("signer") else "secure_boot_unsigned_module"
            signer = module.get("signer") or "none"
            return verdict("needs_operator", code,
                           "Secure Boot refuses %s (signer: %s): enroll the key ('mokutil --import <cert.der>', "
                           "reboot and confirm it in MokManager at the console) or re-sign the module with an "
                           "enrolled key. Nothing is tried at boot." % (module["filename"], signer))
        installed = "%s (version %s)" % (module["filename"], module.get("version"))
        return verdict("repairable", "module_not_loaded", "%s is installed but not loaded: load it." % installed,
                       {"action": "modprobe", "argv": ["modprobe", "nvidia"]})
    if mig_missing:
        return verdict("needs_operator", "mig_layout_lost",
                       "MIG layout lost (%s): re-apply it (MIG Manager's nvidia.com/mig.config label or "
                       "'nvidia-smi mig -cgi ... -C') before GPU pods are scheduled." % _mig_text(mig_missing))
    return verdict("ok", None, "The driver is loaded%s." % (" and the MIG layout is present"
                                                            if facts.get("mig_wanted") else ""))


def summary(result):
    """The one-line annotation value: ``<status>`` or ``<status>: <code>`` plus the repair tried."""
    text = result["status"] if not result.get("code") else "%s: %s" % (result["status"], result["code"])
    attempt = result.get("attempt")
    if attempt:
        text += " (%s %s)" % (attempt["action"], "ok" if attempt.get("rc") == 0 else "failed rc=%s" % attempt.get("rc"))
    return text
