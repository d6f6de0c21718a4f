"""Writes the fake `NVIDIA-Linux-x86_64-<version>.run` and installs drivers into node roots from the host.

The runfile is a single file that both `sh NVIDIA-….run` and `./NVIDIA-….run` run (a shell line that re-executes
it with python3, the rest Python): the installer (`installer.py`, with `kmodbuild.py` in place of its import of it)
with the driver version, the stub module templates (`kmod/`) and the fake `nvidia-smi` (`smi.py`) embedded.
"""
from __future__ import annotations

import os
import subprocess
import sys

from gpulab.nvidia import installer, kmodbuild

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
KMOD_TEMPLATES = ["nvidia_stub.c.in", "Kbuild.in", "dkms.conf.in"]
# `sh` sees: exec python3 "$0" "$@" (the quotes are empty strings); Python sees a string literal
KMODBUILD_IMPORT = "from gpulab.nvidia.kmodbuild import ("
POLYGLOT_HEADER = "#!/bin/sh\n''''exec /usr/bin/python3 \"$0\" \"$@\" #'''\n"


def runfile_name(version: str) -> str:
    return "NVIDIA-Linux-x86_64-%s.run" % version


def _read(name: str) -> str:
    with open(os.path.join(PACKAGE_DIR, name), encoding="utf-8") as handle:
        return handle.read()


def runfile_text(version: str, install_s: float = 0.0) -> str:
    embedded = {"version": version, "kmod": {name: _read(os.path.join("kmod", name)) for name in KMOD_TEMPLATES},
                "smi_source": _read("smi.py"), "install_s": float(install_s)}
    installer_source = _read("installer.py")
    marker = "\nEMBEDDED = None\n"
    if marker not in installer_source or KMODBUILD_IMPORT not in installer_source:
        raise RuntimeError("installer.py lost its EMBEDDED marker or its kmodbuild import")
    future = "from __future__ import annotations\n"
    body = installer_source.replace(future, "", 1).replace(marker, "\nEMBEDDED = %r\n" % embedded, 1)
    # kmodbuild's source in place of its import (ahead of the EMBEDDED above, which then wins)
    start = body.index(KMODBUILD_IMPORT)
    body = body[:start] + _read("kmodbuild.py").replace(future, "", 1) + body[body.index(")\n", start) + 2:]
    # the header's string literal is the module docstring, so the __future__ import must follow it directly
    return POLYGLOT_HEADER + future + "# NVIDIA Accelerated Graphics Driver for Linux-x86_64 %s (gpulab fake " \
        "runfile)\n" % version + body


def write_runfile(version: str, dest_dir: str, cache_dir: str | None = None, install_s: float = 0.0) -> str:
    """Write `dest_dir/NVIDIA-Linux-x86_64-<version>.run` (mode 0755) and, when `cache_dir` is given, prebuild
    the version's default kernel modules there; returns the runfile path. With `install_s`, each install the
    runfile makes lasts at least that long (a fixed step time for benchmarks)."""
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, runfile_name(version))
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(runfile_text(version, install_s))
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)
    if cache_dir:
        prebuild_modules(cache_dir, version, installer.Options(version).flavor)
    return path


def prebuild_modules(cache_dir: str, version: str, flavor: str, headers_dir: str | None = None) -> str:
    """Build the unsigned stub modules for one (version, flavor) into the shared cache (reused when there);
    returns the directory."""
    headers_dir = headers_dir or installer.debian_headers_dir()
    target = kmodbuild.cached_module_dir(cache_dir, headers_dir, version, flavor)
    if not kmodbuild.cached_modules_present(target):
        kmodbuild.build_into_cache(headers_dir, version, flavor, target)
    return target


def install_driver(root: str, version: str, flavor: str | None = None, dkms: bool = False, no_drm: bool = False,
                   signing_key: str | None = None, signing_cert: str | None = None, cache_dir: str | None = None,
                   runfile_dir: str | None = None, extra_args: list | None = None) -> subprocess.CompletedProcess:
    """Run the fake runfile against a node root from the host (for `gpulab up --driver`): the same program,
    flags and results as an operator running it inside the node. Raises RuntimeError (with the installer's
    output) on failure."""
    runfile_dir = runfile_dir or os.path.join(root, "root")
    path = write_runfile(version, runfile_dir)
    installer.ensure_kernel_build_link(root)
    argv = [sys.executable, path, "--silent", "--root", root]
    if flavor:
        argv.append("--kernel-module-type=%s" % flavor)
    if dkms:
        argv.append("--dkms")
    if no_drm:
        argv.append("--no-drm")
    if signing_key:
        argv += ["--module-signing-secret-key", signing_key, "--module-signing-public-key", signing_cert]
    argv += extra_args or []
    env = dict(os.environ)
    if cache_dir:
        env["GPULAB_KMOD_CACHE"] = cache_dir
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError("%s %s failed (exit status %d): %s%s" % (runfile_name(version), " ".join(argv[2:]),
                                                                   done.returncode, done.stdout, done.stderr))
    return done
