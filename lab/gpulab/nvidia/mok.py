"""A node's EFI state (Secure Boot, setup mode, enrolled and staged MOK keys) and the fake `mokutil` over it.

The state lives in `efi.json` (the node's `/run/gpulab-firmware/efi.json`, the twin's stand-in for NVRAM):
```
{"efi": true, "secure_boot": true, "setup_mode": false,
 "enrolled": [{"der_b64": "..."}],                       # MokListRT
 "pending": [{"der_b64": "...", "password_sha256": "..."}],  # MokNew, staged by `mokutil --import`
 "pending_confirmed": false}                             # set by `gpulab mok-confirm` (someone at the console)
```
Output texts are mokutil 0.6's (`tests/unit/fixtures/kernel/mokutil_outputs.txt` and the strings of Debian's
binary). Standard library only (plus the `openssl` command for the certificate text), no `gpulab` imports.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import subprocess
import sys

EFI_STATE_PATH = "/run/gpulab-firmware/efi.json"
NO_EFI_TEXT = "EFI variables are not supported on this system"
PASSWORD_MIN_LEN = 1
PASSWORD_MAX_LEN = 256
PASSWORD_ATTEMPTS = 3


def default_efi_state(efi: bool = True, secure_boot: bool = True) -> dict:
    return {"efi": efi, "secure_boot": secure_boot and efi, "setup_mode": False, "enrolled": [], "pending": [],
            "pending_confirmed": False}


def load_efi_state(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def save_efi_state(path: str, state: dict) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


# ------------------------------------------------------------------------------------------- certificates

def _openssl(args: list, der: bytes) -> str:
    proc = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout"] + args, input=der,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise ValueError("not a valid x509 certificate in DER format")
    return proc.stdout.decode("utf-8", "replace")


def sha1_fingerprint(der: bytes) -> str:
    """Lower-case colon-free SHA1 of the DER certificate (the facts contract's `fingerprint`)."""
    return hashlib.sha1(der).hexdigest()


def colon_hex(hex_text: str) -> str:
    return ":".join(hex_text[i:i + 2] for i in range(0, len(hex_text), 2))


def certificate_text(der: bytes) -> str:
    return _openssl(["-text"], der)


def certificate_subject_cn(der: bytes) -> str:
    subject = _openssl(["-subject", "-nameopt", "multiline"], der)
    match = re.search(r"commonName\s*=\s*(.+)", subject)
    return match.group(1).strip() if match else subject.strip()


def certificate_serial_hex(der: bytes) -> str:
    """Serial as modinfo's `sig_key` prints it: upper-case, colon-separated, even number of digits."""
    serial = _openssl(["-serial"], der).strip().split("=", 1)[1]
    if len(serial) % 2:
        serial = "0" + serial
    return colon_hex(serial.upper())


def certificate_key_id(der: bytes) -> str | None:
    text = certificate_text(der)
    match = re.search(r"Subject Key Identifier:\s*\n\s*([0-9A-Fa-f:]+)", text)
    return match.group(1).replace(":", "").lower() if match else None


def key_der(entry: dict) -> bytes:
    return base64.b64decode(entry["der_b64"])


def key_is_listed(der: bytes, entries: list) -> bool:
    return any(key_der(entry) == der for entry in entries)


def key_summaries(entries: list) -> list:
    """`[{subject, fingerprint}]` of MOK list entries, as `nvidia_driver_facts` reports `mok`."""
    return [{"subject": certificate_subject_cn(key_der(entry)), "fingerprint": sha1_fingerprint(key_der(entry))}
            for entry in entries]


def render_key_list(entries: list) -> str:
    """`--list-enrolled` / `--list-new` body: `[key N]`, SHA1 fingerprint, then the certificate text."""
    blocks = []
    for number, entry in enumerate(entries, start=1):
        der = key_der(entry)
        blocks.append("[key %d]\nSHA1 Fingerprint: %s\n%s" % (number, colon_hex(sha1_fingerprint(der)),
                                                             certificate_text(der)))
    return "\n".join(blocks)


# ----------------------------------------------------------------------------------------------- boot time

def apply_staged_keys(state: dict) -> tuple:
    """What shim's MokManager does at boot: staged keys are enrolled only if someone confirmed them at the
    console; either way the request is consumed. Returns (new state, enrolled entries)."""
    new_state = copy.deepcopy(state)
    newly_enrolled = []
    if new_state.get("pending") and new_state.get("pending_confirmed"):
        for entry in new_state["pending"]:
            if not key_is_listed(key_der(entry), new_state["enrolled"]):
                new_state["enrolled"].append({"der_b64": entry["der_b64"]})
                newly_enrolled.append(entry)
    new_state["pending"] = []
    new_state["pending_confirmed"] = False
    return new_state, newly_enrolled


# ------------------------------------------------------------------------------------------------ mokutil

class Console:
    """Where mokutil prompts and reads passwords (stdin/stdout; replaced in tests)."""

    def __init__(self, stdin=None, stdout=None, stderr=None):
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr

    def read_password(self, prompt: str) -> str | None:
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        self.stdout.write("\n")
        return None if line == "" else line.rstrip("\n")


def _ask_password(console: Console) -> str | None:
    for _attempt in range(PASSWORD_ATTEMPTS):
        first = console.read_password("input password: ")
        if first is None:
            return None
        if not PASSWORD_MIN_LEN <= len(first) <= PASSWORD_MAX_LEN:
            console.stdout.write("password length: %d~%d\n" % (PASSWORD_MIN_LEN, PASSWORD_MAX_LEN))
            continue
        second = console.read_password("input password again: ")
        if first == second:
            return first
        console.stdout.write("password doesn't match\n")
    return None


def cmd_sb_state(state: dict, console: Console) -> int:
    if state.get("secure_boot"):
        console.stdout.write("SecureBoot enabled\n")
        return 0
    console.stdout.write("SecureBoot disabled\n")
    if state.get("setup_mode"):
        console.stdout.write("Platform is in Setup Mode\n")
    return 1


def cmd_list(state: dict, key: str, console: Console) -> int:
    entries = state.get(key, [])
    if entries:
        console.stdout.write(render_key_list(entries))
    elif key == "enrolled":
        console.stdout.write("MokListRT is empty\n")
    return 0


def _read_der(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def cmd_test_key(state: dict, path: str, console: Console) -> int:
    try:
        der = _read_der(path)
    except OSError:
        console.stderr.write("Failed to open %s\n" % path)
        return 255
    if key_is_listed(der, state.get("enrolled", [])):
        console.stdout.write("%s is already enrolled\n" % path)
        return 1
    console.stdout.write("%s is not enrolled\n" % path)
    return 0


def cmd_import(state: dict, paths: list, password_source: str | None, console: Console) -> tuple:
    """Stage keys for enrollment at next boot (MokNew). Returns (rc, new state or None when unchanged)."""
    new_entries = []
    for path in paths:
        try:
            der = _read_der(path)
            _openssl(["-subject"], der)
        except OSError:
            console.stderr.write("Failed to open %s\n" % path)
            return 255, None
        except ValueError:
            console.stderr.write("Abort!!! %s is not a valid x509 certificate in DER format\n" % path)
            return 255, None
        if key_is_listed(der, state.get("enrolled", [])):
            console.stdout.write("SKIP: %s is already enrolled\n" % path)
            continue
        if key_is_listed(der, state.get("pending", [])):
            console.stdout.write("SKIP: %s is already in the enrollment request\n" % path)
            continue
        new_entries.append(der)
    if not new_entries:
        return 0, None
    if password_source is None:
        password = _ask_password(console)
        if password is None:
            console.stderr.write("Abort\n")
            return 255, None
        password_sha256 = hashlib.sha256(password.encode()).hexdigest()
    else:
        password_sha256 = password_source
    new_state = copy.deepcopy(state)
    new_state.setdefault("pending", []).extend(
        {"der_b64": base64.b64encode(der).decode(), "password_sha256": password_sha256} for der in new_entries)
    new_state["pending_confirmed"] = False
    return 0, new_state


def _password_source(args: list) -> str | None:
    if "--root-pw" in args or "-P" in args:
        return "root-password"
    if "--hash-file" in args:
        with open(args[args.index("--hash-file") + 1], encoding="utf-8") as handle:
            return "hash:" + hashlib.sha256(handle.read().strip().encode()).hexdigest()
    return None


def _values_after(args: list, option: str) -> list:
    values = []
    for arg in args[args.index(option) + 1:]:
        if arg.startswith("-"):
            break
        values.append(arg)
    return values


def run(argv: list, state_path: str, console: Console | None = None) -> int:
    """One mokutil invocation against the EFI state file."""
    console = console or Console()
    try:
        state = load_efi_state(state_path)
    except (OSError, ValueError):
        state = default_efi_state(efi=False)
    if not state.get("efi"):
        console.stderr.write(NO_EFI_TEXT + "\n")
        return 255
    if not argv or "--help" in argv or "-h" in argv:
        console.stdout.write("Usage:\n  mokutil OPTIONS [ARGS...]\n\nOptions:\n  --help\t\t\t\tShow help\n"
                             "  --list-enrolled\t\t\tList the enrolled keys\n  --list-new\t\t\t\tList the keys "
                             "to be enrolled\n  --import <der file...>\t\tImport keys\n  --revoke-import\t\t\t"
                             "Revoke the import request\n  --sb-state\t\t\t\tShow SecureBoot State\n"
                             "  --test-key <der file>\t\t\tTest if the key is enrolled or not\n")
        return 0 if argv else 255
    if "--sb-state" in argv:
        return cmd_sb_state(state, console)
    if "--list-enrolled" in argv or "-l" in argv:
        return cmd_list(state, "enrolled", console)
    if "--list-new" in argv or "-N" in argv:
        return cmd_list(state, "pending", console)
    if "--test-key" in argv or "-t" in argv:
        option = "--test-key" if "--test-key" in argv else "-t"
        paths = _values_after(argv, option)
        return cmd_test_key(state, paths[0], console) if paths else 255
    if "--revoke-import" in argv:
        state["pending"], state["pending_confirmed"] = [], False
        save_efi_state(state_path, state)
        return 0
    if "--import" in argv or "-i" in argv:
        option = "--import" if "--import" in argv else "-i"
        paths = _values_after(argv, option)
        if not paths:
            console.stderr.write("Usage:\n  mokutil --import <der file...>\n")
            return 255
        rc, new_state = cmd_import(state, paths, _password_source(argv), console)
        if new_state is not None:
            save_efi_state(state_path, new_state)
        return rc
    console.stderr.write("mokutil: unrecognized option '%s'\n" % argv[0])
    return 255


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = os.environ.get("GPULAB_NODE_ROOT", "/")
    return run(argv, os.path.join(root, EFI_STATE_PATH.lstrip("/")))


if __name__ == "__main__":
    sys.exit(main())
