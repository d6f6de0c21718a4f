"""The node's kernel log and loaded-module list, and the fake `dmesg` and `lsmod` that print them.

`run/kmsg` holds one record per line in the kernel's `/dev/kmsg` format, `<level>,<seq>,<usec since boot>,-;<text>`
(a newline inside a message is written `\\x0a`, as the kernel does); lines in any other format are printed as they
are. The first line may be `# boot_epoch=<float>`, the wall-clock time of the node's boot, used by `dmesg -T`.
Lines the node core writes as `[    12.345678] text` (dmesg's own format) are read too, with the boot time from
`run/boot.json` (`booted_at`). `lsmod` prints `run/modules.json` (`[{name, size, used_by}]`, as
`compute_boot_state` returns them). Standard library only, no `gpulab` imports.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import sys
import time

KMSG_PATH = "/run/gpulab/kmsg"
MODULES_PATH = "/run/gpulab/modules.json"
RECORD_RE = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
DMESG_LINE_RE = re.compile(r"^\[\s*(\d+)\.(\d{6})\] (.*)$")
LEVELS = ["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"]
LEVEL_INFO = 6
LEVEL_WARNING = 4
LEVEL_ERROR = 3


def format_record(seq: int, usec: int, message: str, level: int = LEVEL_INFO) -> str:
    return "%d,%d,%d,-;%s" % (level, seq, usec, message.replace("\n", "\\x0a"))


def boot_records(messages: list, start_usec: int = 4000000, step_usec: int = 13717, first_seq: int = 0) -> list:
    """Records for messages logged during boot, a few milliseconds apart; `messages` items are text or
    (level, text)."""
    records = []
    for offset, item in enumerate(messages):
        level, text = item if isinstance(item, tuple) else (LEVEL_INFO, item)
        records.append(format_record(first_seq + offset, start_usec + offset * step_usec, text, level))
    return records


def new_log(boot_epoch: float, messages: list) -> str:
    """The whole `run/kmsg` for a fresh boot."""
    return "\n".join(["# boot_epoch=%.6f" % boot_epoch] + boot_records(messages)) + "\n"


def guess_level(text: str) -> int:
    """Level of a line logged without one: NVRM errors and rejected modules are errors, Xid lines warnings."""
    if "rejected" in text or "failed" in text.lower():
        return LEVEL_ERROR
    if "NVRM: Xid" in text or "taint" in text:
        return LEVEL_WARNING
    return LEVEL_INFO


def _boot_epoch_from_info(log_path: str) -> float | None:
    try:
        with open(os.path.join(os.path.dirname(log_path), "boot.json"), encoding="utf-8") as handle:
            return float(json.load(handle).get("booted_at"))
    except (OSError, ValueError, TypeError):
        return None


def read_log(path: str) -> tuple:
    """(boot_epoch or None, [(level, usec, text)]); lines in no known format come as (None, None, line)."""
    boot_epoch = None
    entries = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None, []
    for line in lines:
        if line.startswith("# boot_epoch="):
            boot_epoch = float(line.split("=", 1)[1])
            continue
        record = RECORD_RE.match(line)
        dmesg_line = DMESG_LINE_RE.match(line)
        if record:
            entries.append((int(record.group(1)) & 7, int(record.group(3)), record.group(4).replace("\\x0a", "\n")))
        elif dmesg_line:
            usec = int(dmesg_line.group(1)) * 1000000 + int(dmesg_line.group(2))
            entries.append((guess_level(dmesg_line.group(3)), usec, dmesg_line.group(3)))
        elif line:
            entries.append((None, None, line))
    if boot_epoch is None:
        boot_epoch = _boot_epoch_from_info(path)
    return boot_epoch, entries


def append(path: str, messages: list, level: int = LEVEL_WARNING, now: float | None = None) -> list:
    """Append messages logged now to a node's kernel log; returns the records written."""
    boot_epoch, entries = read_log(path)
    now = time.time() if now is None else now
    usec = int((now - boot_epoch) * 1e6) if boot_epoch else int(time.monotonic() * 1e6)
    seq = len(entries)
    records = [format_record(seq + offset, usec + offset, text, level) for offset, text in enumerate(messages)]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(records) + "\n")
    return records


def _time_prefix(usec: int, boot_epoch: float | None, time_format: str) -> str:
    if time_format == "notime":
        return ""
    if time_format == "raw" or boot_epoch is None and time_format in ("ctime", "iso"):
        return "[%5d.%06d] " % (usec // 1000000, usec % 1000000)
    stamp = datetime.datetime.fromtimestamp(boot_epoch + usec / 1e6).astimezone()
    if time_format == "ctime":
        return "[%s] " % stamp.strftime("%a %b %e %H:%M:%S %Y")
    if time_format == "iso":
        return stamp.strftime("%Y-%m-%dT%H:%M:%S,%f") + stamp.strftime("%z")[:3] + ":" + stamp.strftime("%z")[3:] \
            + " "
    return "[%5d.%06d] " % (usec // 1000000, usec % 1000000)


def render_dmesg(boot_epoch: float | None, entries: list, time_format: str = "raw", levels: set | None = None,
                 decode: bool = False) -> str:
    out = []
    for level, usec, text in entries:
        if level is None:
            out.append(text)
            continue
        if levels is not None and LEVELS[level] not in levels:
            continue
        prefix = "kern  :%s: " % LEVELS[level].ljust(6) if decode else ""
        lines = text.split("\n")
        out.append(prefix + _time_prefix(usec, boot_epoch, time_format) + lines[0])
        out.extend(lines[1:])
    return "\n".join(out) + ("\n" if out else "")


def dmesg_main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = os.environ.get("GPULAB_NODE_ROOT", "/")
    time_format, levels, decode = "raw", None, False
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, _sep, value = arg.partition("=")
        if name in ("-T", "--ctime"):
            time_format = "ctime"
        elif name in ("-t", "--notime"):
            time_format = "notime"
        elif name in ("-x", "--decode"):
            decode = True
        elif name == "--time-format":
            time_format = value or (args.pop(0) if args else "raw")
        elif name in ("-l", "--level"):
            levels = set((value or (args.pop(0) if args else "")).split(","))
        elif name in ("-k", "--kernel", "-L", "--color", "-P", "--nopager", "-H", "--human", "-w", "--follow"):
            continue
        elif name in ("-c", "-C", "--clear", "--read-clear"):
            sys.stderr.write("dmesg: klogctl failed: Operation not permitted\n")
            return 1
        else:
            sys.stderr.write("dmesg: unrecognized option '%s'\nTry 'dmesg --help' for more information.\n" % arg)
            return 1
    boot_epoch, entries = read_log(os.path.join(root, KMSG_PATH.lstrip("/")))
    sys.stdout.write(render_dmesg(boot_epoch, entries, time_format, levels, decode))
    return 0


# ------------------------------------------------------------------------------------------------ modules

def render_lsmod(modules: list) -> str:
    """`lsmod` output for `[{name, size, used_by}]` (use count = number of users, as for these modules)."""
    lines = ["Module                  Size  Used by"]
    for module in modules:
        users = module.get("used_by", [])
        count = module.get("refcount", len(users))
        lines.append("%-19s %8d  %d%s" % (module["name"], module["size"], count,
                                          " " + ",".join(users) if users else ""))
    return "\n".join(lines) + "\n"


def lsmod_main(argv: list | None = None) -> int:
    root = os.environ.get("GPULAB_NODE_ROOT", "/")
    try:
        with open(os.path.join(root, MODULES_PATH.lstrip("/")), encoding="utf-8") as handle:
            modules = json.load(handle)
    except (OSError, ValueError):
        modules = []
    sys.stdout.write(render_lsmod(modules))
    return 0


# ------------------------------------------------------------------------------------------------ Xid lines

XID_MESSAGES = {
    13: "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    31: "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ "
        "0x182400_0030198d. Fault is of type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE",
    43: "Ch 00000008",
    45: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 "
        "partition 7, subpartition 1.",
    63: "Row Remapper: New row (0x00000000e8420000) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x00000000e8420000).",
    74: "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error.",
    95: "Uncontained ECC error.",
    109: "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
    119: "Timeout after 6s of waiting for RPC response from GPU%(index)d GSP! Expected function 76 (GSP_RM_CONTROL) "
         "(0x20800a4c 0x4).",
}


def xid_bus(pci_address: str) -> str:
    """`0000:18:00.0` -> `0000:18:00`, the form Xid lines use."""
    return pci_address.rsplit(".", 1)[0]


def xid_lines(hw: dict, gpu_index: int, code: int, pid: int | None = None, process: str | None = None) -> list:
    """Kernel-log lines of Xid `code` on a GPU, in the driver's format
    (`tests/unit/fixtures/nvidia_smi/xid_kernel-log_lines_*`)."""
    gpu = next(gpu for gpu in hw["gpus"] if gpu["index"] == gpu_index)
    who = "pid=%d, name=%s" % (pid, process) if pid else "pid='<unknown>', name=<unknown>"
    message = XID_MESSAGES.get(code, "gpulab injected Xid %d" % code) % {"index": gpu_index}
    lines = ["NVRM: Xid (PCI:%s): %d, %s, %s" % (xid_bus(gpu["pci_address"]), code, who, message)]
    if code == 79:
        lines.append("NVRM: GPU %s: GPU has fallen off the bus." % gpu["pci_address"])
    return lines
