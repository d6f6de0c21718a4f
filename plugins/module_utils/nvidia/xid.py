# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVIDIA Xid events from the kernel log, and what each Xid code asks an operator to do (pure, no I/O).

Private to gpuops.nvidia: other collections must not import this file; its API may change at any time.

Names follow the driver's ``nverror.h`` (NVIDIA/open-gpu-kernel-modules) and NVIDIA's published Xid
catalog; severities and remedies are this collection's reading of the catalog's resolution buckets:
  critical  the GPU is unusable or corrupts data: drain now, reset/reboot, RMA if it returns
  error     hardware/firmware trouble on that GPU: drain and reset the GPU at the next chance
  warning   usually the application (or a recoverable event); act only when it repeats
  info      a consequence of another event; look at what came before it
"""

from __future__ import annotations

import re

_DRAIN_RESET = "Drain the node (cordon + drain), then reset the GPU (nvidia-smi -r -i <gpu>) or reboot the node."
_RMA_IF_REPEATS = " If it repeats after the reset, run dcgmi diag -r 3 and open an RMA for the GPU."
_CHECK_APP = "Usually the application: check the workload's logs for CUDA errors (compute-sanitizer)."
_HW_IF_MANY = " If it hits several applications on the same GPU, drain the node and run dcgmi diag -r 3."
_NVLINK = (
    "Drain the node, check the links (nvidia-smi nvlink -s / -e, fabric manager logs), reset the GPUs of the"
    " NVLink domain or reboot the node; reseat or RMA if one link keeps failing."
)


def _entry(name, severity, remedy):
    return {"name": name, "severity": severity, "remedy": remedy}


XID_CATALOG = {
    8: _entry("GPU stopped processing (channel idle timeout)", "warning", _CHECK_APP + _HW_IF_MANY),
    13: _entry("Graphics engine exception (SM/warp fault in a kernel)", "warning", _CHECK_APP + _HW_IF_MANY),
    31: _entry("GPU memory page fault (MMU fault, illegal address)", "warning", _CHECK_APP + _HW_IF_MANY),
    32: _entry(
        "Invalid or corrupted push buffer stream (PBDMA error)", "error",
        "Often PCIe or system memory corruption: drain the node, reset the GPU, check PCIe AER errors and host memory (EDAC).",
    ),
    38: _entry("Driver firmware error", "error", _DRAIN_RESET + " Update the driver if it repeats."),
    43: _entry("GPU stopped processing (channel reset after a fault)", "info",
               "The application on that channel was stopped; look at the Xid logged just before it. Restart the application."),
    44: _entry("Graphics engine fault during context switch", "error", _DRAIN_RESET + _RMA_IF_REPEATS),
    45: _entry("Preemptive cleanup after a previous error", "info",
               "Consequence of an earlier Xid or of a killed process; act on the earlier Xid, if any."),
    46: _entry("GPU stopped processing", "critical", _DRAIN_RESET + _RMA_IF_REPEATS),
    48: _entry("Double bit ECC error (uncorrectable, DBE)", "critical",
               _DRAIN_RESET + " The reset retires/remaps the bad memory." + _RMA_IF_REPEATS),
    56: _entry("Display engine error", "warning", "Display path only; reset the GPU if the display is needed."),
    57: _entry("Error programming video memory interface", "error", _DRAIN_RESET + _RMA_IF_REPEATS),
    58: _entry("Unstable video memory interface (FB memory error)", "error", _DRAIN_RESET + _RMA_IF_REPEATS),
    61: _entry("Internal micro-controller breakpoint/warning (PMU)", "error", _DRAIN_RESET + " Update the driver if it repeats."),
    62: _entry("Internal micro-controller halt (PMU)", "error", _DRAIN_RESET + _RMA_IF_REPEATS),
    63: _entry("ECC page retirement or row remapping recorded", "warning",
               "Memory was marked for retirement/remapping; it takes effect after a GPU reset. Drain and reset the GPU"
               " at the next maintenance window."),
    64: _entry("ECC page retirement or row remapping failed", "error",
               _DRAIN_RESET + " Check nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT; remapping failure means RMA."),
    68: _entry("Video decoder (NVDEC) exception", "warning", _CHECK_APP),
    69: _entry("Graphics engine class error", "warning", _CHECK_APP + _HW_IF_MANY),
    74: _entry("NVLink error", "error", _NVLINK),
    79: _entry("GPU has fallen off the bus", "critical",
               "The GPU no longer answers on PCIe: drain the node and power-cycle it (a warm reboot may not bring it back);"
               " check PCIe slot, risers, power and cooling; RMA if it falls off again."),
    80: _entry("Corrupted data sent to the GPU (push buffer CRC mismatch)", "error",
               "Drain the node, reset the GPU; check PCIe AER errors and the slot/riser."),
    92: _entry("High single-bit ECC error rate", "warning",
               "Corrected errors are frequent: watch ECC counters and remapped rows; plan a GPU reset and, if the rate stays high, an RMA."),
    94: _entry("Contained ECC error", "error",
               "Only the application using the bad memory was stopped: restart it; drain and reset the GPU soon so the row is"
               " remapped."),
    95: _entry("Uncontained ECC error", "critical",
               "All work on the GPU may have read corrupt data: drain the node now and reset the GPU." + _RMA_IF_REPEATS),
    109: _entry("Context switch timeout", "error",
                "Check the application first; if it repeats or hits other workloads, drain the node and reset the GPU."),
    110: _entry("Security fault error", "error", _DRAIN_RESET + _RMA_IF_REPEATS),
    119: _entry("GSP RPC timeout (GPU System Processor did not answer)", "error",
                _DRAIN_RESET + " Update the driver if it repeats; RMA if it persists across drivers."),
    120: _entry("GSP error", "error", _DRAIN_RESET + " Update the driver if it repeats; RMA if it persists across drivers."),
    121: _entry("C2C (chip-to-chip) link error", "error", _DRAIN_RESET + _RMA_IF_REPEATS),
    136: _entry("NVLink ALI training failure", "error", _NVLINK),
    137: _entry("NVLink FLA privilege error", "warning", "Usually the application using peer memory; check it, then the fabric manager."),
    140: _entry("Unrecovered ECC error (could not be retired or remapped)", "critical",
                "Drain the node now and reset the GPU; the memory could not be isolated." + _RMA_IF_REPEATS),
    143: _entry("GPU initialization failure", "critical",
                "The GPU did not come up: drain the node, power-cycle it; check firmware/driver match; RMA if it fails again."),
    144: _entry("NVLink SAW error", "error", _NVLINK),
    145: _entry("NVLink RLW error", "error", _NVLINK),
    146: _entry("NVLink TLW error", "error", _NVLINK),
    147: _entry("NVLink TREX error", "error", _NVLINK),
    148: _entry("NVLink NVLPW_CTRL error", "error", _NVLINK),
    149: _entry("NVLink NETIR error", "error", _NVLINK),
    150: _entry("NVLink MSE error", "error", _NVLINK),
    151: _entry("Key rotation error (confidential computing)", "error", "Restart the VM or workload; contact support if it repeats."),
    154: _entry("GPU recovery action changed", "warning",
                "The driver now asks for a recovery action: read it with nvidia-smi -q | grep -i -A1 'recovery action'"
                " (reset GPU, reboot node, drain P2P) and do that after draining the node."),
}

_UNKNOWN_SEVERITY = "warning"


def xid_severity(code):
    """Severity of an Xid code from XID_CATALOG; codes it does not list are "warning"."""
    entry = XID_CATALOG.get(code)
    return entry["severity"] if entry else _UNKNOWN_SEVERITY


# --------------------------------------------------------------------------- kernel log parsing

# "NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., text"; drivers before ~R470 omit "PCI:".
_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):\s*"
                     r"(?P<code>\d+)\b,?\s*(?P<rest>.*)$")
_PID_NAME_RE = re.compile(r"^pid=(?P<pid>'[^']*'|[^,]*)(?:,\s*name=(?P<name>[^,]*))?(?:,\s*(?P<message>.*))?$")
_FALLEN_HEAD_RE = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
_FALLEN_RE = re.compile(r"NVRM:.*fallen off the bus", re.I)
_GPU_ADDRESS_RE = re.compile(r"NVRM: GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?):")

# Timestamp prefixes, tried in order on the text before the kernel message.
_DECODE_PREFIX_RE = re.compile(r"^[a-z]+\s*:[a-z]+\s*:\s*")  # dmesg --decode: "kern  :warn  : "
_TIME_PREFIXES = (
    # dmesg --time-format=iso, journalctl -o short-iso / short-iso-precise, RFC 3339 syslog
    re.compile(r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)(?:\s|$)"),
    # dmesg -T / --ctime: "[Sun Feb 23 16:24:18 2025]"
    re.compile(r"^\[(?P<time>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]"),
    # syslog / journalctl short: "Dec  2 11:38:27 worker4 kernel:"
    re.compile(r"^(?P<time>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2})(?:\s|$)"),
    # bare clock time (copied by hand from a terminal): "19:14:43  NVRM: ..."
    re.compile(r"^(?P<time>\d{2}:\d{2}:\d{2})(?:\s|$)"),
)
# plain dmesg: "[  219.470994]" seconds since boot; used only when the line has no wall-clock time
_MONOTONIC_RE = re.compile(r"\[\s*(?P<time>\d+\.\d+)\]")
_NVRM_RE = re.compile(r"NVRM:")
# The 3-line "fallen off the bus" message names the GPU on its first line and says "fallen off" on its third.
_FALLEN_MESSAGE_LINES = 2


def _line_time(prefix):
    """The timestamp as printed in the text before "NVRM:", or None."""
    text = _DECODE_PREFIX_RE.sub("", prefix.strip(), count=1)
    for pattern in _TIME_PREFIXES:
        match = pattern.match(text)
        if match:
            return match.group("time")
    match = _MONOTONIC_RE.search(text)
    return match.group("time") if match else None


def _is_continuation(line):
    """dmesg prints the further lines of one multi-line kernel message indented and without a timestamp.

    An indented line that holds an Xid of its own (a log pasted with indentation) still starts a record.
    """
    if line[:1] not in (" ", "\t"):
        return False
    return _MONOTONIC_RE.match(line.strip()) is None and _XID_RE.search(line) is None


def _records(text):
    """Kernel log lines grouped into records: (head line, [continuation texts])."""
    records = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if records and _is_continuation(line):
            records[-1][1].append(line.strip())
        else:
            records.append((line, []))
    return records


def _unknown_to_none(value):
    if value is None:
        return None
    value = value.strip().strip("'")
    if not value or value == "<unknown>":
        return None
    return value


def _pid(value):
    value = _unknown_to_none(value)
    return int(value) if value is not None and value.isdigit() else None


def _xid_event(head, continuation, match):
    rest = match.group("rest") or ""
    pid = process = None
    pid_match = _PID_NAME_RE.match(rest)
    if pid_match:
        pid = _pid(pid_match.group("pid"))
        process = _unknown_to_none(pid_match.group("name"))
        rest = pid_match.group("message") or ""
    return {
        "code": int(match.group("code")),
        "pci_address": match.group("pci"),
        "pid": pid,
        "process": process,
        "message": " ".join([rest.strip()] + continuation).strip(),
        "time": _line_time(head[:match.start()]),
    }


def _message_body(line):
    """Kernel message text from its first "NVRM:" on (prefixes removed)."""
    match = _NVRM_RE.search(line)
    return line[match.start():] if match else line.strip()


def _record_texts(head, continuation):
    """Texts of a record without prefixes and without the "NVRM:" tag of each line."""
    return [re.sub(r"^NVRM:\s*", "", text) for text in [_message_body(head)] + continuation]


def _record_time(head):
    nvrm = _NVRM_RE.search(head)
    return _line_time(head[:nvrm.start()] if nvrm else head)


def _bus_key(pci_address):
    """Compare "0000:b3:00" (Xid form) with "0000:b3:00.0" (PCI form): 4-digit domain:bus:device, lower case."""
    if not pci_address:
        return None
    domain, bus, device = pci_address.split(".")[0].lower().split(":")
    return "%s:%s:%s" % (domain[-4:], bus, device)


class _FallenOffBusWatcher:
    """Turns the driver's "fallen off the bus" message (no Xid number) into a code-79 event.

    dmesg prints that 3-line message as one record with indented continuation lines; syslog (and dmesg
    without indentation) gives each line a record of its own. So the watcher remembers the record that
    named the GPU ("NVRM: The NVIDIA GPU <addr>") for the next _FALLEN_MESSAGE_LINES records, and the event
    takes its address, time and the joined text from there.
    """

    def __init__(self):
        self.started = None  # {"address", "time", "texts"} of the record naming the GPU
        self.records_since_start = 0

    def observe(self, head, continuation):
        """The code-79 event this non-Xid record completes, or None."""
        texts = _record_texts(head, continuation)
        head_match = _FALLEN_HEAD_RE.search(head)
        if head_match:
            self.started = {"address": head_match.group("pci"), "time": _record_time(head), "texts": []}
            self.records_since_start = 0
        elif self.started is not None:
            self.records_since_start += 1
            if self.records_since_start > _FALLEN_MESSAGE_LINES:
                self.started = None
        if self.started is not None:
            self.started["texts"].extend(texts)
        if not _FALLEN_RE.search(" ".join([head] + continuation)):
            return None
        event = self._event(head, continuation, texts)
        self.started = None
        return event

    def _event(self, head, continuation, texts):
        own_address = _GPU_ADDRESS_RE.search(" ".join([head] + continuation))
        if own_address is None and self.started is not None:
            return _fall_event(self.started["address"], self.started["time"], self.started["texts"])
        return _fall_event(own_address.group("pci") if own_address else None, _record_time(head), texts)


def _fall_event(pci_address, time, texts):
    return {"code": 79, "pci_address": pci_address, "pid": None, "process": None,
            "message": " ".join(texts).strip(), "time": time}


def _without_duplicate_falls(found):
    """Events of ``found`` ((event, from_xid_line) pairs), dropping a fallen-off-bus message for a GPU that
    also has a real Xid 79 line in the same log."""
    real_79_buses = set(_bus_key(event["pci_address"]) for event, from_xid_line in found
                        if from_xid_line and event["code"] == 79)
    return [event for event, from_xid_line in found
            if from_xid_line or _bus_key(event["pci_address"]) not in real_79_buses]


def parse_kernel_log(text):
    """Xid events from kernel log text (dmesg, dmesg -T, dmesg --time-format=iso [--decode], journalctl -k, syslog).

    Each event: {"code", "pci_address" (as printed: "0000:9b:00"), "pid", "process", "message", "time"}.
    ``pid``/``process`` are None when the driver printed none or "<unknown>". ``time`` is the timestamp as
    printed: the wall-clock time when the line has one, else dmesg's seconds since boot ("219.470994"), else None.

    Multi-line messages: indented lines without a timestamp continue the message above them and are
    appended to its ``message``; they never start an event unless they hold an "NVRM: Xid (...)" of their own. Other driver lines (GSP RPC tables, call
    traces, RmInitAdapter failures) are not Xid events and are ignored.

    "GPU has fallen off the bus" without an Xid number: the driver prints "NVRM: The NVIDIA GPU <addr> ...
    has fallen off the bus and is not responding to commands." (or "NVRM: GPU <addr>: GPU has fallen off the
    bus.") when it finds the GPU gone, sometimes without ever logging Xid 79. That text states the Xid 79
    condition, so it yields an event with code 79, the address it names, pid/process None and the driver's
    text as message. When the same log also has a real Xid 79 line for that GPU, only the real one is kept.
    Lines that merely abbreviate an Xid by hand ("Xid 31 PCI:0000:f0:00 ...", no "NVRM: Xid (...)") are
    not kernel output and are not reported.
    """
    found = []
    fall_watcher = _FallenOffBusWatcher()
    for head, continuation in _records(text):
        xid_match = _XID_RE.search(head)
        if xid_match:
            found.append((_xid_event(head, continuation, xid_match), True))
            continue
        fall_event = fall_watcher.observe(head, continuation)
        if fall_event is not None:
            found.append((fall_event, False))
    return _without_duplicate_falls(found)
