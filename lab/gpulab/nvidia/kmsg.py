"""The node's kernel log and loaded-module list, and the fake `dmesg` and `lsmod` that print them.

`run/kmsg` holds one record per line in the kernel's `/dev/kmsg` format, `<level>,<seq>,<usec since boot>,-;<text>`
(a newline inside a message is written `\\x0a`, as the kernel does); lines in any other format are printed as they
are. The first line may be `# boot_epoch=<float>`, the wall-clock time of the node's boot, used by `dmesg -T`.
`run/modules` holds what `lsmod` prints. Standard library only, no `gpulab` imports.
"""
from __future__ import annotations

import datetime
import os
import re
import sys
import time

KMSG_PATH = "/run/gpulab/kmsg"
MODULES_PATH = "/run/gpulab/modules"
RECORD_RE = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
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


def read_log(path: str) -> tuple:
    """(boot_epoch or None, [(level, usec, text)] with unparsed lines as (None, None, line))."""
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
        match = RECORD_RE.match(line)
        if match:
            entries.append((int(match.group(1)) & 7, int(match.group(3)), match.group(4).replace("\\x0a", "\n")))
        elif line:
            entries.append((None, None, line))
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


def render_proc_modules(modules: list) -> str:
    """`/proc/modules` lines: name size refcount users, state, address, taint flags."""
    lines = []
    for module in modules:
        users = module.get("used_by", [])
        count = module.get("refcount", len(users))
        lines.append("%s %d %d %s Live 0x0000000000000000 (%s)" % (
            module["name"], module["size"], count, "".join(user + "," for user in users) or "-",
            module.get("taint", "OE")))
    return "\n".join(lines) + ("\n" if lines else "")


def lsmod_main(argv: list | None = None) -> int:
    root = os.environ.get("GPULAB_NODE_ROOT", "/")
    try:
        with open(os.path.join(root, MODULES_PATH.lstrip("/")), encoding="utf-8") as handle:
            sys.stdout.write(handle.read())
    except OSError:
        sys.stdout.write("Module                  Size  Used by\n")
    return 0
