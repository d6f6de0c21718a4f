"""The stub NVIDIA kernel modules: their C sources, Kbuild and dkms.conf (from `kmod/*.in`), the kbuild build, the
shared cache of unsigned builds and `sign-file` signing.

Standard library only and no `gpulab` imports: `runfile.py` puts this source in the runfile in place of
`installer.py`'s import of it, so the runfile stays one self-contained program.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

# The runfile's own EMBEDDED (installer.py, assigned after this source) holds the templates; None: read kmod/.
EMBEDDED = None
KMOD_CACHE_DIRS = ["/opt/gpulab/cache", "/run/gpulab-cache"]   # where nodes see the lab's DIR/cache
LICENSE_BY_FLAVOR = {"open": "Dual MIT/GPL", "proprietary": "NVIDIA"}


# module file stem -> (symbol it exports, symbol it calls, extra MODULE_* lines)
MODULE_SPECS = {
    "nvidia": ("nvidia_stub_core_api", None, [
        'MODULE_ALIAS("char-major-195-*");',
        'MODULE_ALIAS("pci:v000010DEd*sv*sd*bc03sc02i00*");',
        'MODULE_ALIAS("pci:v000010DEd*sv*sd*bc03sc00i00*");',
        'MODULE_FIRMWARE("nvidia/@VERSION@/gsp_ga10x.bin");',
        'MODULE_FIRMWARE("nvidia/@VERSION@/gsp_tu10x.bin");',
        'MODULE_DESCRIPTION("NVIDIA GPU driver (gpulab stub)");']),
    "nvidia-uvm": (None, "nvidia_stub_core_api", ['MODULE_DESCRIPTION("NVIDIA Unified Memory (gpulab stub)");']),
    "nvidia-modeset": ("nvidia_stub_modeset_api", "nvidia_stub_core_api",
                       ['MODULE_DESCRIPTION("NVIDIA modesetting (gpulab stub)");']),
    "nvidia-drm": (None, "nvidia_stub_modeset_api", ['MODULE_DESCRIPTION("NVIDIA DRM (gpulab stub)");']),
}
MODULE_FILES = ["nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm"]


class InstallerError(Exception):
    """A failure the real installer reports with `ERROR: ...` and exit status 1."""


def _template(name: str) -> str:
    if EMBEDDED:
        return EMBEDDED["kmod"][name]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kmod", name), encoding="utf-8") as handle:
        return handle.read()


def module_source(stem: str, version: str, flavor: str) -> str:
    exported, imported, extra_lines = MODULE_SPECS[stem]
    exports = ("int %s(void);\nint %s(void) { return 0; }\nEXPORT_SYMBOL(%s);" % (exported, exported, exported)
               if exported else "")
    imports = "extern int %s(void);" % imported if imported else ""
    init_call = "%s();" % imported if imported else ""
    replacements = {"@MODULE_FILE@": stem + ".ko", "@FLAVOR@": flavor, "@EXPORTS@": exports,
                    "@IMPORTS@": imports, "@INIT_CALL@": init_call, "@LICENSE@": LICENSE_BY_FLAVOR[flavor],
                    "@EXTRA_INFO@": "\n".join(extra_lines), "@VERSION@": version}
    text = _template("nvidia_stub.c.in")
    for placeholder, value in replacements.items():
        text = text.replace(placeholder, value)
    return text.replace("@VERSION@", version)


def write_module_sources(directory: str, version: str, flavor: str) -> None:
    """The stub modules' C sources, Kbuild and dkms.conf, as NVIDIA ships them in `/usr/src/nvidia-<ver>`."""
    os.makedirs(directory, exist_ok=True)
    for stem in MODULE_FILES:
        with open(os.path.join(directory, stem + ".c"), "w", encoding="utf-8") as handle:
            handle.write(module_source(stem, version, flavor))
    kbuild = _template("Kbuild.in").replace("@OBJECTS@", " ".join(stem + ".o" for stem in MODULE_FILES))
    kbuild = kbuild.replace("@VERSION@", version)
    with open(os.path.join(directory, "Kbuild"), "w", encoding="utf-8") as handle:
        handle.write(kbuild)
    module_lines = "\n".join('BUILT_MODULE_NAME[%d]="%s"\nDEST_MODULE_LOCATION[%d]="/kernel/drivers/video"' % (
        number, stem, number) for number, stem in enumerate(MODULE_FILES))
    dkms_conf = _template("dkms.conf.in").replace("@VERSION@", version).replace("@MODULE_LINES@", module_lines)
    with open(os.path.join(directory, "dkms.conf"), "w", encoding="utf-8") as handle:
        handle.write(dkms_conf)


# -------------------------------------------------------------------------------------------- building

def run_logged(argv: list, log, cwd: str | None = None, env: dict | None = None) -> str:
    log("executing: '%s'..." % " ".join(argv))
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    for line in proc.stdout.splitlines():
        log("   " + line)
    if proc.returncode != 0:
        raise InstallerError("'%s' failed (exit status %d):\n%s" % (" ".join(argv), proc.returncode,
                                                                  proc.stdout[-2000:]))
    return proc.stdout


def headers_name(build_dir: str) -> str:
    """`linux-headers-6.1.0-57-amd64`: the cache key of a kernel build tree."""
    return os.path.basename(os.path.realpath(build_dir))


def build_modules(build_dir: str, version: str, flavor: str, out_dir: str, log=lambda line: None) -> list:
    """Compile the four stub modules with kbuild against `build_dir`; returns the `.ko` paths in `out_dir`."""
    work_dir = tempfile.mkdtemp(prefix="nvidia-build-")
    try:
        write_module_sources(work_dir, version, flavor)
        jobs = "-j%d" % max(1, os.cpu_count() or 1)
        run_logged(["make", jobs, "-C", os.path.realpath(build_dir), "M=" + work_dir, "modules"], log)
        os.makedirs(out_dir, exist_ok=True)
        built = []
        for stem in MODULE_FILES:
            target = os.path.join(out_dir, stem + ".ko")
            shutil.copy2(os.path.join(work_dir, stem + ".ko"), target + ".tmp")
            os.replace(target + ".tmp", target)
            built.append(target)
        return built
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def cached_module_dir(cache_dir: str, build_dir: str, version: str, flavor: str) -> str:
    return os.path.join(cache_dir, headers_name(build_dir), "%s-%s" % (version, flavor))


def cached_modules_present(cached: str) -> bool:
    """Every stub module is in the cache entry `cached` (entries are renamed into place whole)."""
    return all(os.path.exists(os.path.join(cached, stem + ".ko")) for stem in MODULE_FILES)


def modules_from_cache_or_build(build_dir: str, version: str, flavor: str, staging_dir: str, log,
                                cache_dir: str | None = None) -> list:
    """Unsigned stub modules for this kernel in `staging_dir`, copied from the cache (`cache_dir`, else
    `$GPULAB_KMOD_CACHE`, else the first of `KMOD_CACHE_DIRS` there) or compiled."""
    cache_dir = cache_dir or os.environ.get("GPULAB_KMOD_CACHE") or next(
        (path for path in KMOD_CACHE_DIRS if os.path.isdir(path)), KMOD_CACHE_DIRS[0])
    cached = cached_module_dir(cache_dir, build_dir, version, flavor)
    if cached_modules_present(cached):
        log("using prebuilt kernel modules from %s" % cached)
        os.makedirs(staging_dir, exist_ok=True)
        paths = []
        for stem in MODULE_FILES:
            shutil.copy2(os.path.join(cached, stem + ".ko"), os.path.join(staging_dir, stem + ".ko"))
            paths.append(os.path.join(staging_dir, stem + ".ko"))
        return paths
    if os.access(cache_dir, os.W_OK):
        build_into_cache(build_dir, version, flavor, cached, log)
        return modules_from_cache_or_build(build_dir, version, flavor, staging_dir, log, cache_dir)
    return build_modules(build_dir, version, flavor, staging_dir, log)


def build_into_cache(build_dir: str, version: str, flavor: str, cached: str, log=lambda line: None) -> None:
    """Build next to the cache entry and rename it into place, so that nodes building the same entry at the
    same time never see a half-written one (the loser's build is discarded)."""
    parent = os.path.dirname(cached)
    os.makedirs(parent, exist_ok=True)
    private = tempfile.mkdtemp(prefix=".building-", dir=parent)
    try:
        build_modules(build_dir, version, flavor, private, log)
        try:
            os.rename(private, cached)
        except OSError:
            if not os.path.isdir(cached):
                raise
    finally:
        shutil.rmtree(private, ignore_errors=True)


def sign_file_path(build_dir: str) -> str | None:
    candidates = [os.path.join(build_dir, "scripts", "sign-file")] + sorted(
        glob.glob("/usr/lib/linux-kbuild-*/scripts/sign-file"), reverse=True)
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def sign_module(build_dir: str, ko_path: str, secret_key: str, public_key: str, log) -> None:
    sign_file = sign_file_path(build_dir)
    if not sign_file:
        raise InstallerError("Unable to find the module signing utility 'sign-file' in the kernel source tree %s."
                             % build_dir)
    run_logged([sign_file, "sha256", secret_key, public_key, ko_path], log)
