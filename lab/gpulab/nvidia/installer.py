"""The installer behind the fake `NVIDIA-Linux-x86_64-<version>.run` (and `/usr/bin/nvidia-installer`).

It honours the real installer's flags (`--silent`, `--dkms`, `--no-drm`, `--kernel-module-type`,
`-m kernel-open`, `--module-signing-secret-key`/`--module-signing-public-key`, `--no-kernel-modules`,
`--kernel-name`, `--kernel-source-path`, `--uninstall`) and installs:
- four **real** stub kernel modules (nvidia, nvidia-uvm, nvidia-modeset, nvidia-drm), compiled by kbuild against the
  kernel headers at `/lib/modules/<release>/build`, signed with the kernel's `sign-file` when keys are given,
  in `kernel/drivers/video/` — or registered with real `dkms` (`/usr/src/nvidia-<ver>`) which builds, signs with its
  configured MOK key and installs them in `updates/dkms/`;
- the userspace: `/usr/bin/nvidia-smi` (the twin's fake), versioned libraries whose names CDI specs mount
  (`libnvidia-ml.so.<ver>` + `.so.1` link, `libcuda.so.<ver>`, ...), GSP firmware under `/lib/firmware/nvidia/<ver>/`;
- `/usr/bin/nvidia-installer` (a copy of this program) with `/usr/bin/nvidia-uninstall` linking to it, a manifest
  of every installed path (`/var/lib/nvidia/manifest.json`) and the log `/var/log/nvidia-installer.log`.

Kernel modules come from a read-only cache of unsigned builds when one exists (`GPULAB_KMOD_CACHE`, default
`/opt/gpulab/cache` in a node, laid out `<headers name>/<version>-<flavor>/*.ko`), otherwise they are compiled.

Standard library only; its one `gpulab` import, `kmodbuild` (the stub modules' sources, build, cache and signing), is
replaced by that file's source when `runfile.py` embeds this file (with `EMBEDDED` filled in).
"""
from __future__ import annotations

import datetime
import glob
import json
import os
import shutil
import sys
import tempfile
import time

# runfile.py replaces this import with kmodbuild.py's source (the runfile is one self-contained program)
from gpulab.nvidia.kmodbuild import (LICENSE_BY_FLAVOR, MODULE_FILES, InstallerError, modules_from_cache_or_build,
                                     run_logged, sign_module, write_module_sources)

# Filled in by runfile.py: {"version": str, "kmod": {template name: text}, "smi_source": str}
EMBEDDED = None

MANIFEST_PATH = "/var/lib/nvidia/manifest.json"
LOG_PATH = "/var/log/nvidia-installer.log"
UNINSTALL_LOG_PATH = "/var/log/nvidia-uninstall.log"
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
OPEN_MODULES_MIN_BRANCH = 560   # from 560 the installer defaults to the open kernel modules
USERSPACE_LIBRARIES = ["libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler", "libnvidia-nvvm", "libnvidia-cfg",
                       "libnvidia-allocator", "libnvidia-gpucomp", "libnvidia-opencl", "libcudadebugger"]
GSP_FIRMWARE = ["gsp_ga10x.bin", "gsp_tu10x.bin"]

HEADERS_MISSING_TEXT = (
    "ERROR: Unable to find the kernel source tree for the currently running kernel.  Please make sure you have "
    "installed the kernel source files for your kernel and that they are properly configured; on Red Hat Linux "
    "systems, for example, be sure you have the 'kernel-source' or 'kernel-devel' RPM installed.  If you know the "
    "correct kernel source files are installed, you may specify the kernel source path with the "
    "'--kernel-source-path' command line option.")
NOUVEAU_TEXT = (
    "ERROR: The Nouveau kernel driver is currently in use by your system.  This driver is incompatible with the "
    "NVIDIA driver, and must be disabled before proceeding.  Please consult the NVIDIA driver README and your "
    "Linux distribution's documentation for details on how to correctly disable the Nouveau kernel driver.")


# ------------------------------------------------------------------------------------------- templates

def _smi_source() -> str:
    if EMBEDDED:
        return EMBEDDED["smi_source"]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "smi.py"), encoding="utf-8") as handle:
        return handle.read()


def smi_program(version: str) -> str:
    """`/usr/bin/nvidia-smi` of driver `version` (the runfile and the nvidia-smi package install the same)."""
    return "#!/usr/bin/python3\n# NVIDIA System Management Interface %s (gpulab fake)\n" % version + _smi_source()


# ------------------------------------------------------------------------------------------ installing

class Options:
    """The installer's command line, with the real installer's defaults."""

    def __init__(self, version: str):
        self.version = version
        self.silent = False
        self.dkms = False
        self.no_drm = False
        self.flavor = "open" if int(version.split(".")[0]) >= OPEN_MODULES_MIN_BRANCH else "proprietary"
        self.secret_key = None
        self.public_key = None
        self.kernel_modules = True
        self.userspace = True
        self.kernel_name = None
        self.kernel_source_path = None
        self.uninstall = False
        self.disable_nouveau = False
        self.no_nouveau_check = False
        self.root = "/"
        self.kmod_cache = None   # module cache dir; None: $GPULAB_KMOD_CACHE or KMOD_CACHE_DIRS

    def kernel_release(self) -> str:
        return self.kernel_name or os.uname().release


def parse_args(argv: list, version: str) -> Options:
    opts = Options(version)
    args = list(argv)
    # accepted and without effect in the twin (nothing here test-loads modules or builds an initramfs)
    ignored = {"--accept-license", "--no-questions", "--ui=none", "-q", "--no-x-check",
               "--no-install-compat32-libs", "--install-libglvnd", "--no-cc-version-check",
               "--no-systemd", "--run-nvidia-xconfig", "--no-rebuild-initramfs", "--rebuild-initramfs", "-a", "-Z",
               "--no-wine-files", "--skip-module-load", "--skip-module-unload",
               "--allow-installation-with-running-driver", "--no-disable-nouveau"}
    ignored_with_value = {"--module-signing-hash", "--module-signing-x509-hash", "--module-signing-script",
                          "--module-signing-key-path", "--log-file-name", "--tmpdir", "-j", "--concurrency-level"}
    while args:
        arg = args.pop(0)
        name, has_value, value = arg.partition("=")
        if name in ("-m", "--kernel-module-build-directory", "--kernel-module-type", "-M", "--kernel-name", "-k",
                    "--kernel-source-path", "--module-signing-secret-key", "--module-signing-public-key",
                    "--root") + tuple(ignored_with_value) and not has_value:
            if not args:
                raise InstallerError("Option '%s' requires an argument." % name)
            value = args.pop(0)
        if name in ("-s", "--silent"):
            opts.silent = True
        elif name == "--dkms":
            opts.dkms = True
        elif name == "--no-dkms":
            opts.dkms = False
        elif name == "--no-drm":
            opts.no_drm = True
        elif name in ("-M", "--kernel-module-type"):
            if value not in LICENSE_BY_FLAVOR:
                raise InstallerError("Invalid kernel module type '%s'; valid types are 'open' and 'proprietary'."
                                     % value)
            opts.flavor = value
        elif name in ("-m", "--kernel-module-build-directory"):
            opts.flavor = "open" if value == "kernel-open" else "proprietary"
        elif name == "--module-signing-secret-key":
            opts.secret_key = value
        elif name == "--module-signing-public-key":
            opts.public_key = value
        elif name in ("--no-kernel-modules", "--no-kernel-module"):
            opts.kernel_modules = False
        elif name in ("-K", "--kernel-module-only"):
            opts.userspace = False
        elif name in ("-k", "--kernel-name"):
            opts.kernel_name = value
        elif name == "--kernel-source-path":
            opts.kernel_source_path = value
        elif name == "--uninstall":
            opts.uninstall = True
        elif name == "--disable-nouveau":
            opts.disable_nouveau = True
        elif name in ("-z", "--no-nouveau-check"):
            opts.no_nouveau_check = True
        elif name == "--root":
            opts.root = value
        elif arg in ignored or name in ignored or name in ignored_with_value:
            continue
        else:
            raise InstallerError("Unrecognized option: '%s'" % arg)
    if bool(opts.secret_key) != bool(opts.public_key):
        raise InstallerError("Both --module-signing-secret-key and --module-signing-public-key must be given.")
    return opts


def _in_root(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


class Installation:
    """Files created by one install, recorded so that `--uninstall` removes exactly them."""

    def __init__(self, root: str, opts: Options, log):
        self.root, self.opts, self.log = root, opts, log
        self.paths = []

    def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = _in_root(self.root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target + ".tmp", "wb") as handle:
            handle.write(data)
        os.chmod(target + ".tmp", mode)
        os.replace(target + ".tmp", target)
        self.paths.append(path)

    def symlink(self, path: str, target_name: str) -> None:
        link = _in_root(self.root, path)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target_name, link)
        self.paths.append(path)


def kernel_build_dir(opts: Options) -> str:
    """The kernel tree modules are built against; InstallerError like the real one when it is missing."""
    build_dir = opts.kernel_source_path or _in_root(opts.root, "/lib/modules/%s/build" % opts.kernel_release())
    if not os.path.isfile(os.path.join(build_dir, "Makefile")):
        raise InstallerError(HEADERS_MISSING_TEXT)
    return build_dir


def nouveau_in_use(root: str) -> bool:
    """nouveau in the node's loaded-module list (`/run/gpulab/modules.json`)."""
    try:
        with open(_in_root(root, "/run/gpulab/modules.json"), encoding="utf-8") as handle:
            return any(module.get("name") == "nouveau" for module in json.load(handle))
    except (OSError, ValueError):
        return False


def write_nouveau_blacklist(inst: "Installation") -> None:
    """What `--disable-nouveau` does: a modprobe.d file; nouveau stays loaded until the next boot."""
    inst.write("/etc/modprobe.d/nvidia-installer-disable-nouveau.conf",
               b"# generated by nvidia-installer\nblacklist nouveau\noptions nouveau modeset=0\n")


def install_kernel_modules_direct(inst: Installation, build_dir: str) -> None:
    opts = inst.opts
    staging = tempfile.mkdtemp(prefix="nvidia-modules-")
    try:
        modules_from_cache_or_build(build_dir, opts.version, opts.flavor, staging, inst.log, opts.kmod_cache)
        for stem in MODULE_FILES:
            if stem == "nvidia-drm" and opts.no_drm:
                continue
            ko_path = os.path.join(staging, stem + ".ko")
            if opts.secret_key:
                sign_module(build_dir, ko_path, opts.secret_key, opts.public_key, inst.log)
            with open(ko_path, "rb") as handle:
                inst.write("/lib/modules/%s/kernel/drivers/video/%s.ko" % (opts.kernel_release(), stem),
                           handle.read())
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def dkms_tree_args(root: str) -> list:
    if root == "/":
        return []
    return ["--dkmstree", _in_root(root, "/var/lib/dkms"), "--sourcetree", _in_root(root, "/usr/src"),
            "--installtree", _in_root(root, "/lib/modules")]


def install_kernel_modules_dkms(inst: Installation, build_dir: str) -> None:
    """Register the module sources with real dkms, which builds, signs (its MOK key) and installs them."""
    opts = inst.opts
    source_dir = "/usr/src/nvidia-%s" % opts.version
    staging = tempfile.mkdtemp(prefix="nvidia-src-")
    try:
        write_module_sources(staging, opts.version, opts.flavor)
        for name in sorted(os.listdir(staging)):
            with open(os.path.join(staging, name), "rb") as handle:
                inst.write("%s/%s" % (source_dir, name), handle.read())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if opts.no_drm:
        conf_path = _in_root(inst.root, source_dir + "/dkms.conf")
        with open(conf_path, encoding="utf-8") as handle:
            conf = handle.read()
        with open(conf_path, "w", encoding="utf-8") as handle:
            handle.write(conf.replace('BUILT_MODULE_NAME[3]="nvidia-drm"\nDEST_MODULE_LOCATION[3]="/kernel/drivers/'
                                      'video"\n', ""))
    os.makedirs(_in_root(inst.root, "/var/lib/dkms"), exist_ok=True)
    os.makedirs(_in_root(inst.root, "/lib/modules/%s" % opts.kernel_release()), exist_ok=True)
    argv = ["dkms", "install", "-m", "nvidia", "-v", opts.version, "-k", opts.kernel_release(),
            "--kernelsourcedir", os.path.realpath(build_dir)] + dkms_tree_args(inst.root)
    _run_dkms(argv, inst.root, inst.log)


def _run_dkms(argv: list, root: str, log) -> None:
    """Run dkms; for a `--root` other than `/` its trees point into the root and a `depmod` shim on PATH adds
    `-b <root>` (dkms itself always runs plain `depmod -a <kernel>`)."""
    if root == "/":
        run_logged(argv, log)
        return
    shim_dir = tempfile.mkdtemp(prefix="nvidia-depmod-")
    try:
        depmod = shutil.which("depmod", path="/usr/sbin:/sbin:/usr/bin:/bin") or "/usr/sbin/depmod"
        shim = os.path.join(shim_dir, "depmod")
        with open(shim, "w", encoding="utf-8") as handle:
            handle.write('#!/bin/sh\nexec %s -b "%s" "$@"\n' % (depmod, root))
        os.chmod(shim, 0o755)
        env = dict(os.environ, PATH=shim_dir + ":" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
        # dkms looks for sign-file under the host's /lib/modules/<kernel>/build, which is inside the root here
        release = argv[argv.index("-k") + 1] if "-k" in argv else os.uname().release
        root_sign_file = _in_root(root, "/lib/modules/%s/build/scripts/sign-file" % release)
        if "sign_file" not in env and os.path.exists(root_sign_file):
            env["sign_file"] = os.path.realpath(root_sign_file)
        run_logged(argv, log, env=env)
    finally:
        shutil.rmtree(shim_dir, ignore_errors=True)


def install_userspace(inst: Installation) -> None:
    version = inst.opts.version
    inst.write("/usr/bin/nvidia-smi", smi_program(version).encode(), 0o755)
    for library in USERSPACE_LIBRARIES:
        versioned = "%s.so.%s" % (library, version)
        inst.write("%s/%s" % (LIB_DIR, versioned), ("gpulab stub of %s\n" % versioned).encode(), 0o755)
        inst.symlink("%s/%s.so.1" % (LIB_DIR, library), versioned)
        inst.symlink("%s/%s.so" % (LIB_DIR, library), "%s.so.1" % library)
    for firmware in GSP_FIRMWARE:
        inst.write("/lib/firmware/nvidia/%s/%s" % (version, firmware), ("gpulab GSP %s\n" % version).encode())


def install_self(inst: Installation, program_path: str) -> None:
    with open(program_path, "rb") as handle:
        inst.write("/usr/bin/nvidia-installer", handle.read(), 0o755)
    inst.symlink("/usr/bin/nvidia-uninstall", "nvidia-installer")


def run_depmod(root: str, release: str, log) -> None:
    if not os.path.isdir(_in_root(root, "/lib/modules/%s" % release)):
        return
    argv = ["depmod", release] if root == "/" else ["depmod", "-b", root, release]
    try:
        run_logged(argv, log)
    except InstallerError as exc:
        log("WARNING: %s" % exc)


def read_manifest(root: str) -> dict | None:
    try:
        with open(_in_root(root, MANIFEST_PATH), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def uninstall(root: str, log) -> dict:
    """Remove everything the last install recorded (and its dkms registration)."""
    manifest = read_manifest(root)
    if manifest is None:
        raise InstallerError("No NVIDIA driver is currently installed.")
    if manifest.get("dkms"):
        argv = ["dkms", "remove", "-m", "nvidia", "-v", manifest["kernel_module_version"], "--all"]
        argv += dkms_tree_args(root)
        try:
            _run_dkms(argv, root, log)
        except InstallerError as exc:
            log("WARNING: %s" % exc)
    remove_paths(root, manifest["paths"])
    os.unlink(_in_root(root, MANIFEST_PATH))
    run_depmod(root, manifest["kernel_release"], log)
    return manifest


def is_kernel_path(path: str) -> bool:
    return path.startswith("/lib/modules/") or path.startswith("/usr/src/nvidia-")


def remove_paths(root: str, paths: list) -> None:
    for path in sorted(paths, reverse=True):
        target = _in_root(root, path)
        if os.path.lexists(target):
            os.unlink(target)
    for path in sorted({os.path.dirname(p) for p in paths}, key=len, reverse=True):
        try:
            os.removedirs(_in_root(root, path))
        except OSError:
            pass


def replace_previous(root: str, opts: Options, previous: dict, log) -> list:
    """Remove the side of the previous install this one replaces; returns the kept paths (the other side,
    when `--no-kernel-modules` or `--kernel-module-only` replace only one)."""
    if opts.kernel_modules and opts.userspace:
        log("Uninstalling the previous driver %s before installing %s" % (previous["version"], opts.version))
        uninstall(root, log)
        return []
    replaced = [path for path in previous["paths"] if is_kernel_path(path) == opts.kernel_modules]
    log("Replacing the %s of driver %s with %s" % ("kernel modules" if opts.kernel_modules else "userspace",
                                                   previous["version"], opts.version))
    remove_paths(root, replaced)
    return [path for path in previous["paths"] if path not in replaced]


def install(opts: Options, program_path: str | None, log) -> dict:
    """Install the driver per `opts` into `opts.root`; returns the manifest written."""
    root = opts.root
    if nouveau_in_use(root) and not opts.no_nouveau_check:
        if opts.disable_nouveau:
            write_nouveau_blacklist(Installation(root, opts, log))
            raise InstallerError(NOUVEAU_TEXT + "  One or more modprobe configuration files to disable Nouveau have "
                                 "been written.  You will need to reboot your system and possibly rebuild the "
                                 "initramfs before these changes can take effect.")
        raise InstallerError(NOUVEAU_TEXT)
    previous = read_manifest(root)
    inst = Installation(root, opts, log)
    if opts.disable_nouveau:
        write_nouveau_blacklist(inst)
    if previous is not None:
        inst.paths = replace_previous(root, opts, previous, log)
    if opts.kernel_modules:
        build_dir = kernel_build_dir(opts)
        if opts.dkms:
            install_kernel_modules_dkms(inst, build_dir)
        else:
            install_kernel_modules_direct(inst, build_dir)
    if opts.userspace:
        install_userspace(inst)
        if program_path:
            install_self(inst, program_path)
    if opts.kernel_modules and not opts.dkms:
        run_depmod(root, opts.kernel_release(), log)
    kept = previous if previous and inst.paths and not (opts.kernel_modules and opts.userspace) else None
    manifest = {"version": opts.version, "flavor": opts.flavor, "dkms": opts.dkms, "no_drm": opts.no_drm,
                "kernel_release": opts.kernel_release(), "signed": bool(opts.secret_key),
                "kernel_module_version": opts.version if opts.kernel_modules else (
                    kept.get("kernel_module_version") if kept else None),
                "userspace_version": opts.version if opts.userspace else (
                    kept.get("userspace_version") if kept else None),
                "paths": inst.paths,
                "installed_at": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")}
    if kept and not opts.kernel_modules:
        manifest.update({key: kept.get(key) for key in ("flavor", "dkms", "no_drm", "signed")})
    manifest_path = _in_root(root, MANIFEST_PATH)
    os.makedirs(os.path.dirname(manifest_path), exist_ok=True)
    with open(manifest_path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return manifest


def pad_and_time_install(root: str, started: float, install_s: float) -> None:
    """A runfile written with a fixed install time (`gpulab up --install-seconds`) lasts at least that long; the
    manifest gets when the install started and how long it took, for the benchmarks' floor."""
    remaining = install_s - (time.time() - started)
    if remaining > 0:
        time.sleep(remaining)
    manifest_path = _in_root(root, MANIFEST_PATH)
    with open(manifest_path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest.update(install_started_ts=started, install_s=round(time.time() - started, 3))
    with open(manifest_path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)


def debian_headers_dir() -> str:
    """The newest Debian kernel build tree installed (`/usr/src/linux-headers-<ver>-amd64`)."""
    candidates = sorted(path for path in glob.glob("/usr/src/linux-headers-*")
                        if os.path.isfile(os.path.join(path, "Makefile")) and not path.endswith("-common"))
    if not candidates:
        raise InstallerError("no kernel headers in /usr/src: apt-get install linux-headers-amd64")
    return candidates[-1]


def ensure_kernel_build_link(root: str, release: str | None = None, headers_dir: str | None = None) -> str:
    """Make `/lib/modules/<release>/build` (and `source`) in a node root point at the Debian headers: the
    node runs the host's kernel, which has no headers package, so the twin lends it Debian's. Returns the link."""
    release = release or os.uname().release
    headers_dir = headers_dir or debian_headers_dir()
    module_dir = _in_root(root, "/lib/modules/%s" % release)
    os.makedirs(module_dir, exist_ok=True)
    link = os.path.join(module_dir, "build")
    if os.path.islink(link) and os.readlink(link) == headers_dir:
        return link
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(headers_dir, link)
    common = headers_dir.rsplit("-", 1)[0] + "-common"
    source = os.path.join(module_dir, "source")
    if os.path.isdir(common) and not os.path.lexists(source):
        os.symlink(common, source)
    return link


def preinstall(root: str, version: str, cache_dir: str | None = None, flavor: str | None = None) -> dict:
    """`gpulab up --driver VERSION`: install a driver into a node root before its first boot, as the runfile
    would (`--silent`, default module type, no dkms). Returns the manifest; InstallerError on failure."""
    ensure_kernel_build_link(root)
    argv = ["--silent", "--root", root] + (["--kernel-module-type=%s" % flavor] if flavor else [])
    opts = parse_args(argv, version)
    opts.kmod_cache = cache_dir   # not through os.environ: this runs inside the caller's process
    log = Log(version, argv)
    manifest = install(opts, None, log)
    log("Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: %s) is now complete."
        % version)
    log.save(root)
    return manifest


class Log:
    """Lines for `/var/log/nvidia-installer.log`, echoed to the terminal unless `--silent`."""

    def __init__(self, version: str, argv: list, path: str = LOG_PATH):
        self.path = path
        self.lines = ["nvidia-installer log file '%s'" % path,
                      "creation time: %s" % datetime.datetime.now().strftime("%a %b %e %H:%M:%S %Y"),
                      "installer version: %s" % version, "",
                      "PATH: %s" % os.environ.get("PATH", ""), "", "nvidia-installer command line:",
                      "    ./nvidia-installer"] + ["    %s" % arg for arg in argv] + [""]

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def save(self, root: str) -> None:
        path = _in_root(root, self.path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(self.lines) + "\n")


def main(argv: list | None = None, version: str | None = None, program_path: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    program_path = program_path or os.path.abspath(sys.argv[0])
    version = version or (EMBEDDED or {}).get("version")
    if "--version" in argv or "-v" in argv:
        print("\nnvidia-installer:  version %s\n  The NVIDIA Software Installer for Unix/Linux.\n" % version)
        return 0
    if os.path.basename(sys.argv[0]) == "nvidia-uninstall" and "--uninstall" not in argv:
        argv = argv + ["--uninstall"]
    log = Log(version, argv, UNINSTALL_LOG_PATH if "--uninstall" in argv else LOG_PATH)
    started = time.time()
    root = "/"
    try:
        opts = parse_args(argv, version)
        root = opts.root
        if opts.uninstall:
            manifest = uninstall(root, log)
            message = "Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver for Linux-x86_64 " \
                      "(%s) is complete." % manifest["version"]
        else:
            install(opts, program_path, log)
            pad_and_time_install(root, started, float((EMBEDDED or {}).get("install_s") or 0))
            message = "Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: %s) is " \
                      "now complete." % version
    except InstallerError as exc:
        text = str(exc) if str(exc).startswith("ERROR:") else "ERROR: %s" % exc
        log(text)
        log.save(root)
        sys.stderr.write("\n%s\n\nERROR: Installation has failed.  Please see the file '%s' for details.  You may "
                         "find suggestions on fixing installation problems in the README available on the Linux "
                         "driver download page at www.nvidia.com.\n\n" % (text, log.path))
        return 1
    log(message)
    log.save(root)
    if not opts.silent:
        print("\n%s\n" % message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
