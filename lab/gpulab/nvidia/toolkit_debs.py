"""The NVIDIA Container Toolkit's four .deb packages, with the names, versions and dependencies of NVIDIA's
libnvidia-container repository (`https://nvidia.github.io/libnvidia-container/stable/deb/amd64/`, files
`<name>_<version>-1_amd64.deb`; dependencies as in NVIDIA/nvidia-container-toolkit `packaging/debian/control`):

- `libnvidia-container1`: `libnvidia-container.so.<version>` and `libnvidia-container-go.so.<version>`;
- `libnvidia-container-tools`: `nvidia-container-cli`; Depends `libnvidia-container1 (>= V), (<< 2.0.0)`;
- `nvidia-container-toolkit-base`: `nvidia-ctk` (the twin's, `gpulab.nvidia.ctk`: real CDI specs),
  `nvidia-container-runtime` (hands every call to `runc`, as the real one does for a container without GPUs),
  `nvidia-cdi-hook`, `/etc/nvidia-container-runtime/config.toml`;
- `nvidia-container-toolkit`: `nvidia-container-runtime-hook`; Depends `nvidia-container-toolkit-base (= V)`,
  `libnvidia-container-tools (= V), (<< 2.0.0)`.

Programs other than `nvidia-ctk` and `nvidia-container-runtime` are stubs that print their version and refuse the
rest (the twin has no GPUs to hand to a container through them). `package_specs` is also what `rpms` builds the
same packages from for NVIDIA's dnf repository (rpm `Requires` as in NVIDIA's spec files).
"""
from __future__ import annotations

import os

from gpulab.nvidia import debs

PACKAGE_RELEASE = "1"
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
NODE_LIB = "/opt/gpulab/lib"

CONFIG_TOML = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""


def _stub_program(name: str, version: str) -> bytes:
    return ("#!/bin/sh\n# gpulab stub of %(name)s %(version)s\n"
            "case \"$1\" in --version|-v|version) echo \"%(name)s version %(version)s\"; exit 0;; esac\n"
            "echo \"%(name)s: not modelled by the twin\" >&2\nexit 1\n" % {"name": name, "version": version}).encode()


def _ctk_program() -> bytes:
    return ("#!/bin/sh\nexec env PYTHONPATH=%s /usr/bin/python3 -m gpulab.nvidia.ctk \"$@\"\n" % NODE_LIB).encode()


def _runtime_program(version: str) -> bytes:
    return ("#!/bin/sh\n# gpulab stub of nvidia-container-runtime %s: the low-level runtime does the work\n"
            "exec runc \"$@\"\n" % version).encode()


def _control(name: str, version: str, description: str, depends: str, section: str) -> str:
    lines = ["Package: %s" % name, "Version: %s-%s" % (version, PACKAGE_RELEASE), "Architecture: amd64",
             "Maintainer: NVIDIA CORPORATION <cudatools@nvidia.com>", "Section: %s" % section, "Priority: optional",
             "Homepage: https://github.com/NVIDIA/nvidia-container-toolkit"]
    if depends:
        lines.append("Depends: %s" % depends)
    lines.append("Description: %s (gpulab stub of toolkit %s)" % (description, version))
    return "\n".join(lines) + "\n"


def _library_fill(version: str):
    def fill(tree: str) -> None:
        for library in ("libnvidia-container", "libnvidia-container-go"):
            versioned = "%s.so.%s" % (library, version)
            debs.write_into(tree, "%s/%s" % (LIB_DIR, versioned), ("gpulab stub of %s\n" % versioned).encode())
            debs.symlink_into(tree, "%s/%s.so.1" % (LIB_DIR, library), versioned)
    return fill


def _tools_fill(version: str):
    def fill(tree: str) -> None:
        debs.write_into(tree, "/usr/bin/nvidia-container-cli", _stub_program("nvidia-container-cli", version), 0o755)
    return fill


def _base_fill(version: str):
    def fill(tree: str) -> None:
        debs.write_into(tree, "/usr/bin/nvidia-ctk", _ctk_program(), 0o755)
        debs.write_into(tree, "/usr/bin/nvidia-container-runtime", _runtime_program(version), 0o755)
        debs.write_into(tree, "/usr/bin/nvidia-cdi-hook", _stub_program("nvidia-cdi-hook", version), 0o755)
        debs.write_into(tree, "/etc/nvidia-container-runtime/config.toml", CONFIG_TOML.encode())
        debs.write_into(tree, "/DEBIAN/conffiles", b"/etc/nvidia-container-runtime/config.toml\n")
    return fill


def _toolkit_fill(version: str):
    def fill(tree: str) -> None:
        debs.write_into(tree, "/usr/bin/nvidia-container-runtime-hook",
                        _stub_program("nvidia-container-runtime-hook", version), 0o755)
    return fill


def package_specs(version: str) -> list:
    """The four packages of one toolkit version: name, description, deb `Depends`, rpm `Requires`, files."""
    exact = "%s-%s" % (version, PACKAGE_RELEASE)
    return [
        {"name": "libnvidia-container1", "description": "NVIDIA container runtime library", "section": "libs",
         "depends": "", "requires": [], "fill": _library_fill(version)},
        {"name": "libnvidia-container-tools", "section": "utils",
         "description": "NVIDIA container runtime library (command-line tools)",
         "depends": "libnvidia-container1 (>= %s), libnvidia-container1 (<< 2.0.0)" % exact,
         "requires": ["libnvidia-container1 >= %s" % exact, "libnvidia-container1 < 2.0.0"],
         "fill": _tools_fill(version)},
        {"name": "nvidia-container-toolkit-base", "description": "NVIDIA Container Toolkit Base", "section": "utils",
         "depends": "", "requires": [], "fill": _base_fill(version)},
        {"name": "nvidia-container-toolkit", "description": "NVIDIA Container toolkit", "section": "utils",
         "depends": "nvidia-container-toolkit-base (= %s), libnvidia-container-tools (= %s), "
                    "libnvidia-container-tools (<< 2.0.0)" % (exact, exact),
         "requires": ["nvidia-container-toolkit-base == %s" % exact, "libnvidia-container-tools >= %s" % exact,
                      "libnvidia-container-tools < 2.0.0"],
         "fill": _toolkit_fill(version)},
    ]


def build_packages(out_dir: str, version: str) -> list:
    """The four .deb files of one toolkit version (such as 1.17.8); returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    return [debs.build_deb(out_dir, spec["name"], "%s-%s" % (version, PACKAGE_RELEASE),
                           _control(spec["name"], version, spec["description"], spec["depends"], spec["section"]),
                           spec["fill"])
            for spec in package_specs(version)]
