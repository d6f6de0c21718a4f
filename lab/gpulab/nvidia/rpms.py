"""rpm packages and dnf repositories of the twin, made with the real tools Debian packages (`rpmbuild`, `rpmsign`,
`createrepo_c`): the NVIDIA Container Toolkit's rpms (the files and dependencies of `toolkit_debs.package_specs`)
and what a Rocky 9 node's own repository must offer the roles (`python3-dnf-plugin-versionlock`: a stand-in whose
plugin is the host's, Debian's `dnf-plugins-core`).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from gpulab.nvidia import toolkit_debs


def build_rpm(out_dir: str, name: str, version: str, release: str, summary: str, requires: list, fill,
              arch: str = "x86_64", config_files: tuple = (), epoch: str = "", scripts: dict | None = None,
              provides: tuple = ()) -> str:
    """`out_dir/<name>-<version>-<release>.<arch>.rpm` with the files `fill(tree)` writes and the scriptlets
    `scripts` ({"post": shell, "preun": shell}); returns its path."""
    work = tempfile.mkdtemp(prefix="rpm-%s-" % name)
    try:
        tree = os.path.join(work, "tree")
        os.makedirs(tree)
        fill(tree)
        shutil.rmtree(os.path.join(tree, "DEBIAN"), ignore_errors=True)
        files = []
        for directory, _subdirs, names in os.walk(tree):
            for entry in names:
                path = os.path.join(directory, entry)[len(tree):]
                files.append(("%%config(noreplace) %s" if path in config_files else "%s") % path)
        spec = "\n".join(
            ["Name: %s" % name] + (["Epoch: %s" % epoch] if epoch else [])
            + ["Version: %s" % version, "Release: %s" % release, "Summary: %s" % summary,
             "License: Apache-2.0", "Vendor: NVIDIA CORPORATION", "BuildArch: %s" % arch, "AutoReqProv: no"]
            + ["Requires: %s" % requirement for requirement in requires]
            + ["Provides: %s" % capability for capability in provides]
            + ["", "%description", "%s (gpulab stub)" % summary, "", "%install",
               "cp -a %s/. %%{buildroot}/" % tree, ""]
            + ["%%%s\n%s\n" % (phase, body) for phase, body in sorted((scripts or {}).items())]
            + ["%files"] + sorted(files)) + "\n"
        spec_path = os.path.join(work, "%s.spec" % name)
        with open(spec_path, "w", encoding="utf-8") as handle:
            handle.write(spec)
        subprocess.run(["rpmbuild", "--quiet", "--define", "_topdir %s" % os.path.join(work, "top"),
                        "--define", "_build_id_links none", "--define", "__os_install_post %{nil}", "-bb", spec_path],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        built = os.path.join(work, "top", "RPMS", arch, "%s-%s-%s.%s.rpm" % (name, version, release, arch))
        os.makedirs(out_dir, exist_ok=True)
        target = os.path.join(out_dir, os.path.basename(built))
        shutil.move(built, target)
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_toolkit_rpms(out_dir: str, version: str) -> list:
    """The four toolkit rpms of one version, named and versioned as in NVIDIA's repository (`1.17.8-1`)."""
    return [build_rpm(out_dir, spec["name"], version, toolkit_debs.PACKAGE_RELEASE, spec["description"],
                      spec["requires"], spec["fill"], config_files=("/etc/nvidia-container-runtime/config.toml",))
            for spec in toolkit_debs.package_specs(version)]


def build_versionlock_plugin_rpm(out_dir: str) -> str:
    """Rocky 9 BaseOS's `python3-dnf-plugin-versionlock` (4.3.0-16.el9), as a stand-in: the node's `dnf versionlock`
    is Debian's dnf-plugins-core on the host, so the package only has to be there to be installed."""
    def fill(tree: str) -> None:
        os.makedirs(os.path.join(tree, "usr/share/doc/python3-dnf-plugin-versionlock"))
        with open(os.path.join(tree, "usr/share/doc/python3-dnf-plugin-versionlock/README.gpulab"), "w",
                  encoding="utf-8") as handle:
            handle.write("The versionlock plugin of this node is the host's (Debian's dnf-plugins-core).\n")
    return build_rpm(out_dir, "python3-dnf-plugin-versionlock", "4.3.0", "16.el9", "Version Lock Plugin for DNF",
                     [], fill, arch="noarch")


def build_bash_rpm(out_dir: str) -> str:
    """Rocky 9 BaseOS's `bash` (`/bin/sh`, which every rpm with a scriptlet requires), as a stand-in: the node's
    shell is the host's, so the package only has to be there to be installed."""
    def fill(tree: str) -> None:
        os.makedirs(os.path.join(tree, "usr/share/doc/bash"))
        with open(os.path.join(tree, "usr/share/doc/bash/README.gpulab"), "w", encoding="utf-8") as handle:
            handle.write("The shell of this node is the host's (Debian's bash).\n")
    return build_rpm(out_dir, "bash", "5.1.8", "9.el9", "The GNU Bourne Again shell", [], fill,
                     provides=("/bin/sh", "/bin/bash"))


def build_dkms_rpm(out_dir: str) -> str:
    """EPEL 9's `dkms` (what NVIDIA's `kmod-nvidia-*-dkms` require; RHEL and Rocky take it from EPEL), as a
    stand-in: the node's `dkms` is the host's (Debian's), so the package only has to be there to be installed."""
    def fill(tree: str) -> None:
        os.makedirs(os.path.join(tree, "usr/share/doc/dkms"))
        with open(os.path.join(tree, "usr/share/doc/dkms/README.gpulab"), "w", encoding="utf-8") as handle:
            handle.write("The dkms of this node is the host's (Debian's dkms).\n")
    return build_rpm(out_dir, "dkms", "3.1.5", "1.el9", "Dynamic Kernel Module Support Framework", [], fill,
                     arch="noarch")


def index_repo(repo_dir: str) -> str:
    """`repodata/` of the rpms in `repo_dir` (createrepo_c); returns the path of `repomd.xml`."""
    subprocess.run(["createrepo_c", "--quiet", repo_dir], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    return os.path.join(repo_dir, "repodata", "repomd.xml")
