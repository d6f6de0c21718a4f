"""rpm packages and dnf repositories of the twin, made with the real tools Debian packages (`rpmbuild`, `rpmsign`,
`createrepo_c`): the NVIDIA Container Toolkit's rpms (the files and dependencies of `toolkit_debs.package_specs`)
and what a Rocky 9 node's own repository must offer the roles (`python3-dnf-plugin-versionlock`: a stand-in whose
plugin is the host's, Debian's `dnf-plugins-core`; `kernel-devel`/`kernel-headers` of the running kernel, whose build
tree is the host's Debian headers at Rocky's path, `/usr/src/kernels/<release>`).
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
        for directory, subdirs, names in os.walk(tree):
            # a symbolic link to a directory is a file of the package too (os.walk lists it with the directories)
            for entry in names + [sub for sub in subdirs if os.path.islink(os.path.join(directory, sub))]:
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


def kernel_rpm_version(release: str) -> tuple:
    """(version, release) of the kernel packages of a running kernel `release` (`uname -r`). Rocky's own
    (`5.14.0-503.14.1.el9_5.x86_64`) is `kernel-devel-<version>-<release>.<arch>`; the twin runs the host's kernel,
    whose release need not be an rpm version (`6.18.44-fc-v1252`: a dash too many, no arch), so the part after the
    first dash becomes the rpm release with its dashes as underscores."""
    version, _dash, rest = release.partition("-")
    return version, (rest.replace("-", "_") or "0")


def build_kernel_devel_rpms(out_dir: str, release: str, headers_dir: str) -> list:
    """Rocky 9 BaseOS's `kernel-devel` and `kernel-headers` of the running kernel `release`, as stand-ins.

    `kernel-devel` puts the kernel's build tree where Rocky has it, `/usr/src/kernels/<release>` (here a link to the
    host's Debian build tree `headers_dir`, which the node's modules really build against), and provides the name
    the `nvidia_driver` role asks for (`kernel-devel-<release>`: with the host's release that name is no rpm NEVRA,
    see `kernel_rpm_version`). On Rocky `/lib/modules/<release>/build` is a link the kernel package owns, dangling
    until kernel-devel is installed; the twin has no kernel package, so kernel-devel's %post makes the link when
    the node has none. `kernel-headers` (the kernel's userspace headers in `/usr/include`) only has to be there:
    the node's `/usr/include` is the host's (Debian's `linux-libc-dev`)."""
    version, rpm_release = kernel_rpm_version(release)

    def fill_devel(tree: str) -> None:
        os.makedirs(os.path.join(tree, "usr/src/kernels"))
        os.symlink(headers_dir, os.path.join(tree, "usr/src/kernels", release))

    def fill_headers(tree: str) -> None:
        os.makedirs(os.path.join(tree, "usr/share/doc/kernel-headers"))
        with open(os.path.join(tree, "usr/share/doc/kernel-headers/README.gpulab"), "w", encoding="utf-8") as handle:
            handle.write("The kernel's userspace headers of this node are the host's (Debian's linux-libc-dev).\n")

    build_link = "/lib/modules/%s/build" % release
    post = ('if [ ! -e %s ]; then mkdir -p /lib/modules/%s && rm -f %s && ln -s /usr/src/kernels/%s %s; fi'
            % (build_link, release, build_link, release, build_link))
    return [build_rpm(out_dir, "kernel-devel", version, rpm_release, "Development package for building kernel modules"
                      " to match the kernel", [], fill_devel, provides=("kernel-devel-%s" % release,),
                      scripts={"post": post}),
            build_rpm(out_dir, "kernel-headers", version, rpm_release, "Header files for the Linux kernel for use by"
                      " glibc", [], fill_headers)]


def index_repo(repo_dir: str) -> str:
    """`repodata/` of the rpms in `repo_dir` (createrepo_c); returns the path of `repomd.xml`."""
    subprocess.run(["createrepo_c", "--quiet", repo_dir], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    return os.path.join(repo_dir, "repodata", "repomd.xml")
