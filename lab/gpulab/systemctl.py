"""``systemctl`` of a node twin (``python -m gpulab.systemctl``): the node has no systemd, so units' ExecStart run
as plain processes of the node, with their state in /run/gpulab-systemd; units left running are started again at
boot. nsinit installs it at each boot and calls ``start_units_at_boot`` after chroot."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

from gpulab.osutil import in_root, is_zombie, write_file

CONTROL_DIR = "/run/gpulab-control"   # reboot/poweroff requests to the daemon (nsinit binds nodes/<name>/control here)
SYSTEMD_STATE_DIR = "/run/gpulab-systemd"
# units started with systemctl and not stopped: on the node's disk, started again at boot ("enabled and running")
SYSTEMD_RESTART_LIST = "/var/lib/gpulab-systemd/started"
# units a boot sequence of oneshot units starts after them (kubeadm's kubelet start at boot reads it)
BOOT_DEFERRED = SYSTEMD_STATE_DIR + "/boot-deferred"
# units enabled with this systemctl (on the node's disk): the enabled oneshot units among them run at boot
SYSTEMD_ENABLED_LIST = "/var/lib/gpulab-systemd/enabled"
BOOT_SEQUENCE_VERB = "__boot-sequence"
ONESHOT_TIMEOUT_S = 600.0
# systemd's system unit search path (RKE2's tarball install puts its units in /usr/local/lib/systemd/system)
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")

WRAPPER = """#!/bin/sh
# gpulab node twin: systemctl stand-in from lab/gpulab/systemctl.py (installed at each boot by gpulab.nsinit)
exec env PYTHONPATH=/opt/gpulab/lib /usr/bin/python3 -m gpulab.systemctl "$@"
"""


def install_systemctl(merged: str) -> None:
    """The node has no systemd: a small ``systemctl`` (``python -m gpulab.systemctl``) runs units'
    ExecStart itself, so Ansible's service/systemd modules and an operator's ``systemctl restart`` work."""
    write_file(in_root(merged, "/usr/bin/systemctl"), WRAPPER, 0o755)
    os.makedirs(in_root(merged, "/run/systemd/system"), exist_ok=True)
    os.makedirs(in_root(merged, SYSTEMD_STATE_DIR), exist_ok=True)


def unit_name(name: str) -> str:
    return name if "." in name else name + ".service"


def unit_path(unit: str):
    for directory in UNIT_DIRS:
        path = os.path.join(directory, unit)
        if os.path.exists(path):
            return path
    return None


def unit_settings(unit: str) -> dict:
    """[Unit]/[Service] keys of a unit with its drop-ins (an empty ``ExecStart=`` resets, as in systemd)."""
    settings = {}
    path = unit_path(unit)
    files = [path] if path else []
    for directory in UNIT_DIRS:
        dropins = os.path.join(directory, unit + ".d")
        if os.path.isdir(dropins):
            files += [os.path.join(dropins, name) for name in sorted(os.listdir(dropins)) if name.endswith(".conf")]
    for file_path in files:
        with open(file_path) as stream:
            for raw in stream:
                line = raw.strip()
                if not line or line.startswith(("#", ";", "[")) or "=" not in line:
                    continue
                key, value = (part.strip() for part in line.split("=", 1))
                if key == "ExecStart" and not value:
                    settings.pop("ExecStart", None)
                else:
                    settings[key] = value
    return settings


def unit_pid(unit: str):
    """PID of the unit's running main process, None when it is not running."""
    try:
        with open(os.path.join(SYSTEMD_STATE_DIR, unit + ".pid")) as stream:
            pid = int(stream.read())
    except (OSError, ValueError):
        return None
    return None if is_zombie(pid) else pid


def unit_state(unit: str) -> str:
    if unit_pid(unit):
        return "active"
    return "failed" if os.path.exists(os.path.join(SYSTEMD_STATE_DIR, unit + ".failed")) else "inactive"


def enabled_state(unit: str) -> str:
    if os.path.realpath(os.path.join("/etc/systemd/system", unit)) == "/dev/null":
        return "masked"
    for directory in ("/etc/systemd/system", "/lib/systemd/system"):
        for entry in os.listdir(directory) if os.path.isdir(directory) else []:
            if entry.endswith((".wants", ".requires")) and os.path.lexists(os.path.join(directory, entry, unit)):
                return "enabled"
    settings = unit_settings(unit)
    return "disabled" if settings.get("WantedBy") or settings.get("RequiredBy") else "static"


def remember_started(unit: str, started: bool) -> None:
    units = set(started_units())
    units = units | {unit} if started else units - {unit}
    os.makedirs(os.path.dirname(SYSTEMD_RESTART_LIST), exist_ok=True)
    with open(SYSTEMD_RESTART_LIST, "w") as stream:
        stream.write("".join(name + "\n" for name in sorted(units)))


def started_units() -> list:
    try:
        with open(SYSTEMD_RESTART_LIST) as stream:
            return [line.strip() for line in stream if line.strip()]
    except FileNotFoundError:
        return []


def enabled_units() -> list:
    """Units enabled with this systemctl on the node (the host's own enabled units show through the overlay but
    are not the node's)."""
    try:
        with open(SYSTEMD_ENABLED_LIST) as stream:
            return [line.strip() for line in stream if line.strip()]
    except FileNotFoundError:
        return []


def boot_oneshot_units() -> list:
    """The node's enabled ``Type=oneshot`` units of multi-user.target (a boot-time check such as gpuops-selfcheck),
    by name."""
    return sorted(unit for unit in enabled_units() if unit_path(unit) and enabled_state(unit) == "enabled"
                  and unit_settings(unit).get("Type") == "oneshot")


def deferred_at_boot() -> list:
    """Units a boot sequence starts after its oneshot units (``Before=``); empty when no sequence runs."""
    try:
        with open(BOOT_DEFERRED) as stream:
            return [line.strip() for line in stream if line.strip()]
    except FileNotFoundError:
        return []


def start_units_at_boot(log) -> None:
    """After chroot: the units that ran before the reboot run again (their log goes to /run/gpulab-systemd).

    Enabled oneshot units of multi-user.target run first, in the background (``boot_sequence``: the boot itself
    does not wait, as the node is up before systemd finishes), one after the other, and the units they are
    ``Before=`` (kubelet, k3s, RKE2) start only once they have ended, as systemd orders them."""
    os.makedirs(SYSTEMD_STATE_DIR, exist_ok=True)
    oneshots = boot_oneshot_units()
    ordered_after = set()
    for unit in oneshots:
        ordered_after |= set(unit_settings(unit).get("Before", "").split())
    candidates = set(started_units()) | {unit for unit in ordered_after if enabled_state(unit) == "enabled"}
    deferred = sorted(unit for unit in candidates if unit in ordered_after and unit_path(unit))
    for unit in started_units():
        if unit not in deferred and unit not in oneshots and start_unit(unit) != 0:
            log("unit %s failed to start at boot" % unit)
    if oneshots:
        write_file(BOOT_DEFERRED, "".join(unit + "\n" for unit in deferred))
        with open(os.path.join(SYSTEMD_STATE_DIR, "boot-sequence.log"), "ab") as boot_log:
            subprocess.Popen(["/usr/bin/python3", "-m", "gpulab.systemctl", BOOT_SEQUENCE_VERB] + oneshots
                             + ["--then"] + deferred, stdin=subprocess.DEVNULL, stdout=boot_log, stderr=boot_log,
                             start_new_session=True, env=dict(os.environ, PYTHONPATH="/opt/gpulab/lib"))


def boot_sequence(args: list) -> int:
    """The boot's oneshot units one after the other, then the units ordered after them."""
    split = args.index("--then") if "--then" in args else len(args)
    for unit in args[:split]:
        sys.stdout.write("%s %s: rc=%d\n" % (time.strftime("%H:%M:%S"), unit, start_unit(unit)))
        sys.stdout.flush()
    for unit in args[split + 1:]:
        sys.stdout.write("%s %s: rc=%d\n" % (time.strftime("%H:%M:%S"), unit, start_unit(unit)))
    try:
        os.unlink(BOOT_DEFERRED)
    except FileNotFoundError:
        pass
    return 0


def oneshot_timeout_s(settings: dict) -> float:
    try:
        return float(settings.get("TimeoutStartSec", "").rstrip("s") or ONESHOT_TIMEOUT_S)
    except ValueError:
        return ONESHOT_TIMEOUT_S


def start_unit(unit: str) -> int:
    settings = unit_settings(unit)
    oneshot = settings.get("Type") == "oneshot"
    if not oneshot:  # a oneshot unit runs to its end: there is nothing left running to start again at boot
        remember_started(unit, True)
    if unit_pid(unit):
        return 0
    command = settings.get("ExecStart")
    if not command:
        sys.stderr.write("Failed to start %s: Unit %s not found.\n" % (unit, unit))
        return 5
    argv = shlex.split(command.lstrip("-@+!:"))
    log_path = os.path.join(SYSTEMD_STATE_DIR, unit + ".log")
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    with open(os.path.join(SYSTEMD_STATE_DIR, unit + ".pid"), "w") as stream:
        stream.write(str(process.pid))
    if oneshot:  # systemctl start of a oneshot unit returns when its ExecStart has ended, as systemd does
        try:
            process.wait(timeout=oneshot_timeout_s(settings))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.unlink(os.path.join(SYSTEMD_STATE_DIR, unit + ".pid"))
    else:
        time.sleep(0.3)  # a service that dies at once failed to start, as systemd reports it
    if process.poll() is not None and process.returncode != 0:
        open(os.path.join(SYSTEMD_STATE_DIR, unit + ".failed"), "w").close()
        sys.stderr.write("Job for %s failed because the control process exited with error code.\n"
                         "See \"systemctl status %s\" for details.\n" % (unit, unit))
        return 1
    try:
        os.unlink(os.path.join(SYSTEMD_STATE_DIR, unit + ".failed"))
    except FileNotFoundError:
        pass
    return 0


def stop_unit(unit: str) -> int:
    remember_started(unit, False)
    pid = unit_pid(unit)
    if pid:
        os.killpg(pid, 15) if os.getpgid(pid) == pid else os.kill(pid, 15)
        deadline = time.monotonic() + 10
        while unit_pid(unit) and time.monotonic() < deadline:
            time.sleep(0.05)
        if unit_pid(unit):
            os.kill(pid, 9)
    for suffix in (".pid", ".failed"):
        try:
            os.unlink(os.path.join(SYSTEMD_STATE_DIR, unit + suffix))
        except FileNotFoundError:
            pass
    return 0


def show_unit(unit: str) -> str:
    settings = unit_settings(unit)
    path = unit_path(unit)
    active = unit_state(unit)
    masked = enabled_state(unit) == "masked"
    properties = {
        "Id": unit, "Names": unit, "Description": settings.get("Description", unit),
        "LoadState": "masked" if masked else ("loaded" if path else "not-found"),
        "ActiveState": active, "SubState": {"active": "running", "failed": "failed"}.get(active, "dead"),
        "UnitFileState": enabled_state(unit) if path else "", "FragmentPath": path or "",
        "MainPID": str(unit_pid(unit) or 0), "Type": settings.get("Type", "simple"),
        "ExecMainStatus": "0", "CanReload": "yes" if settings.get("ExecReload") else "no",
    }
    return "".join("%s=%s\n" % item for item in properties.items())


def set_enabled(unit: str, enabled: bool) -> int:
    if not unit_path(unit):
        sys.stderr.write("Failed to %s unit: Unit file %s does not exist.\n" % ("enable" if enabled else "disable",
                                                                              unit))
        return 1
    wants = os.path.join("/etc/systemd/system", "multi-user.target.wants")
    link = os.path.join(wants, unit)
    units = set(enabled_units())
    units = units | {unit} if enabled else units - {unit}
    os.makedirs(os.path.dirname(SYSTEMD_ENABLED_LIST), exist_ok=True)
    with open(SYSTEMD_ENABLED_LIST, "w") as stream:
        stream.write("".join(name + "\n" for name in sorted(units)))
    if enabled and not os.path.lexists(link):
        os.makedirs(wants, exist_ok=True)
        os.symlink(unit_path(unit), link)
        sys.stderr.write("Created symlink %s \u2192 %s.\n" % (link, unit_path(unit)))
    elif not enabled and os.path.lexists(link):
        os.unlink(link)
        sys.stderr.write("Removed \"%s\".\n" % link)
    return 0


def request_power(action: str) -> int:
    with open(os.path.join(CONTROL_DIR, "request.tmp"), "w") as stream:
        json.dump({"action": action, "when": "now", "program": "systemctl"}, stream)
    os.replace(os.path.join(CONTROL_DIR, "request.tmp"), os.path.join(CONTROL_DIR, "request"))
    return 0


def list_units() -> str:
    lines = []
    for unit in sorted(known_units()):
        active = unit_state(unit)
        sub = {"active": "running", "failed": "failed"}.get(active, "dead")
        lines.append("%s loaded %s %s %s" % (unit, active, sub, unit_settings(unit).get("Description", unit)))
    return "\n".join(lines) + "\n"


def list_unit_files() -> str:
    lines = ["UNIT FILE STATE VENDOR PRESET"]
    lines += ["%s %s enabled" % (unit, enabled_state(unit)) for unit in sorted(known_units())]
    return "\n".join(lines) + "\n\n%d unit files listed.\n" % (len(lines) - 1)


def known_units() -> set:
    units = set()
    for directory in UNIT_DIRS:
        if os.path.isdir(directory):
            units |= {name for name in os.listdir(directory) if name.endswith(".service") and "@" not in name}
    return units


def systemctl_main(args: list) -> int:
    """``systemctl`` of a node twin: units run as plain processes of the node, state in /run/gpulab-systemd."""
    words = [arg for arg in args if not arg.startswith("-")]
    if "--version" in args:
        sys.stdout.write("systemd 252 (252.gpulab)\n")
        return 0
    if not words:
        sys.stdout.write(list_units())
        return 0
    if words[0] == BOOT_SEQUENCE_VERB:
        return boot_sequence(args[1:])
    verb, units = words[0], [unit_name(word) for word in words[1:]]
    os.makedirs(SYSTEMD_STATE_DIR, exist_ok=True)
    if verb in ("reboot", "poweroff", "halt"):
        return request_power("reboot" if verb == "reboot" else "poweroff")
    if verb in ("daemon-reload", "daemon-reexec", "reset-failed"):
        return 0
    if verb == "list-units":
        sys.stdout.write(list_units())
        return 0
    if verb == "list-unit-files":
        sys.stdout.write(list_unit_files())
        return 0
    if verb == "show":
        sys.stdout.write("\n".join(show_unit(unit) for unit in units))
        return 0
    if verb == "is-active":
        states = [unit_state(unit) for unit in units]
        sys.stdout.write("".join(state + "\n" for state in states))
        return 0 if all(state == "active" for state in states) else 3
    if verb == "is-failed":
        return 0 if any(unit_state(unit) == "failed" for unit in units) else 1
    if verb == "is-enabled":
        for unit in units:
            if not unit_path(unit):
                sys.stderr.write("Failed to get unit file state for %s: No such file or directory\n" % unit)
                return 1
        states = [enabled_state(unit) for unit in units]
        sys.stdout.write("".join(state + "\n" for state in states))
        return 0 if all(state in ("enabled", "static") for state in states) else 1
    if verb == "status":
        for unit in units:
            state = unit_state(unit)
            sys.stdout.write("* %s - %s\n     Loaded: %s\n     Active: %s\n" % (
                unit, unit_settings(unit).get("Description", unit), "loaded (%s)" % unit_path(unit)
                if unit_path(unit) else "not-found", state))
        return 0 if all(unit_state(unit) == "active" for unit in units) else (3 if all(unit_path(u) for u in units) else 4)
    actions = {"start": [start_unit], "stop": [stop_unit], "restart": [stop_unit, start_unit],
               "try-restart": [stop_unit, start_unit], "reload-or-restart": [stop_unit, start_unit],
               "reload": [stop_unit, start_unit], "enable": [lambda unit: set_enabled(unit, True)],
               "disable": [lambda unit: set_enabled(unit, False)]}
    if verb not in actions:
        sys.stderr.write("gpulab node twin: systemctl %s is not supported\n" % verb)
        return 1
    if verb in ("enable", "disable") and "--now" in args:
        actions[verb].append(start_unit if verb == "enable" else stop_unit)
    for unit in units:
        if verb == "try-restart" and not unit_pid(unit):
            continue
        if verb not in ("stop", "disable") and not unit_path(unit):
            sys.stderr.write("Failed to %s %s: Unit %s not found.\n" % (verb, unit, unit))
            return 5
        for action in actions[verb]:
            rc = action(unit)
            if rc:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(systemctl_main(sys.argv[1:]))
