"""Node personalities (`gpulab up --os debian12|ubuntu2204|rocky9`): what tells a node's software which
distribution it runs, written on the node's disk (the overlay's upper dir) before its first boot.

A node is an overlay of the Debian host, so every personality runs the host's binaries; what changes is what Ansible
and package tools read: `/etc/os-release` (and `/usr/lib/os-release`), `/etc/lsb-release` (Ubuntu),
`/etc/redhat-release`, `/etc/rocky-release`, `/etc/system-release` (Rocky), `/etc/debian_version` (Debian and Ubuntu
have it, Rocky not: an overlay whiteout hides the host's), and the package manager the distribution has: apt/dpkg on
Debian and Ubuntu, dnf/rpm on Rocky (Debian's `dnf` and `rpm` packages, with Rocky's `dnf.conf`,
`/etc/yum.repos.d/rocky.repo` whose BaseOS is the twin's mirror, Rocky's key file and rpm database path).

Kernel headers: each distribution's package of the running kernel's build tree is what the `nvidia_driver` role
installs when `/lib/modules/<release>/build` is missing: `kernel-devel-<release>` on Rocky, from the twin's BaseOS
(`gpulab.nvidia.rpms.build_kernel_devel_rpms`: the tree at Rocky's `/usr/src/kernels/<release>`, a link to the host's
Debian headers, so DKMS really builds against it); `linux-headers-<release>` on Debian and Ubuntu (the twin serves none:
a node's headers are lent at boot, `nvidia.boot`, unless the fault `headers-missing`).

DKMS signing (`dkms_mok`): the key pair each distribution's DKMS signs modules with. Ubuntu 22.04's dkms (2.8.7) signs
with shim-signed's MOK (`/var/lib/shim-signed/mok/MOK.priv`, `MOK.der`, what `update-secureboot-policy --new-key`
makes); the node's dkms is the host's (Debian's 3.0.10), so an Ubuntu node's `/etc/dkms/framework.conf` points it
there. dkms 3.x (Debian 12's, Rocky 9's from EPEL) signs with `/var/lib/dkms/mok.key` and `mok.pub`, its own
defaults (Debian's framework.conf has them commented): nothing to write.

Not changed: the kernel release (`uname -r` is the host's on every personality: the kernel's UTS release is not per
namespace), so Rocky's `kernel-devel-<release>` carries the host's release, which is no rpm NEVRA (a package
`kernel-devel` that provides that name stands in), and the build tree is Debian's. Ansible sees `ansible_distribution`
Debian/Ubuntu/Rocky, `os_family` Debian/Debian/RedHat and `ansible_pkg_mgr` apt/apt/dnf.
"""
from __future__ import annotations

import os
import stat

DEFAULT_OS = "debian12"

_UBUNTU_2204_OS_RELEASE = """PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""

_UBUNTU_2204_LSB_RELEASE = """DISTRIB_ID=Ubuntu
DISTRIB_RELEASE=22.04
DISTRIB_CODENAME=jammy
DISTRIB_DESCRIPTION="Ubuntu 22.04.5 LTS"
"""

_ROCKY_9_OS_RELEASE = """NAME="Rocky Linux"
VERSION="9.4 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.4"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.4"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.4"
"""

_ROCKY_9_RELEASE = "Rocky Linux release 9.4 (Blue Onyx)\n"

# Rocky 9's /etc/dnf/dnf.conf as installed
_ROCKY_9_DNF_CONF = """[main]
gpgcheck=1
installonly_limit=3
clean_requirements_on_remove=True
best=True
skip_if_unavailable=False
"""

_SHIM_SIGNED_MOK = ("/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der")
_DKMS3_MOK = ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")

# Ubuntu 22.04's dkms signs with shim-signed's MOK; the node runs Debian's dkms 3.0.10, told so here
_UBUNTU_DKMS_FRAMEWORK_CONF = """# gpulab ubuntu2204: Ubuntu 22.04's dkms (2.8.7) signs modules with shim-signed's MOK, the pair
# update-secureboot-policy makes; this node's dkms (Debian's 3.0.10) is pointed at the same pair.
mok_signing_key=%s
mok_certificate=%s
""" % _SHIM_SIGNED_MOK

PERSONALITIES = {
    "debian12": {"files": {}, "hidden": [], "dirs": [], "package_manager": "apt", "headers_package": "linux-headers",
                 "dkms_mok": _DKMS3_MOK},
    "ubuntu2204": {
        "files": {"/etc/os-release": _UBUNTU_2204_OS_RELEASE, "/usr/lib/os-release": _UBUNTU_2204_OS_RELEASE,
                  "/etc/lsb-release": _UBUNTU_2204_LSB_RELEASE, "/etc/debian_version": "bookworm/sid\n",
                  "/etc/dkms/framework.conf": _UBUNTU_DKMS_FRAMEWORK_CONF},
        "hidden": [], "dirs": [], "package_manager": "apt", "headers_package": "linux-headers",
        "dkms_mok": _SHIM_SIGNED_MOK},
    "rocky9": {
        "files": {"/etc/os-release": _ROCKY_9_OS_RELEASE, "/usr/lib/os-release": _ROCKY_9_OS_RELEASE,
                  "/etc/redhat-release": _ROCKY_9_RELEASE, "/etc/rocky-release": _ROCKY_9_RELEASE,
                  "/etc/system-release": _ROCKY_9_RELEASE, "/etc/dnf/dnf.conf": _ROCKY_9_DNF_CONF,
                  # Debian's rpm keeps its database in ~/.rpmdb (beside dpkg's); Rocky's is /var/lib/rpm
                  "/etc/rpm/macros.dbpath": "%_dbpath /var/lib/rpm\n",
                  # what the rocky-release package's provides tell dnf on a real node
                  "/etc/dnf/vars/releasever": "9\n",
                  # Rocky has no `local` plugin (Debian's dnf-plugins-core enables it; it re-serves every installed
                  # package from an unsigned repository, which fails gpgcheck)
                  "/etc/dnf/plugins/local.conf": "[main]\nenabled=0\n"},
        "hidden": ["/etc/debian_version", "/etc/lsb-release"], "dirs": ["/etc/yum.repos.d", "/var/lib/rpm"],
        "package_manager": "dnf", "headers_package": "kernel-devel", "dkms_mok": _DKMS3_MOK},
}
OS_NAMES = tuple(PERSONALITIES)


def package_manager(os_name: str) -> str:
    return PERSONALITIES[os_name]["package_manager"]


def headers_package(os_name: str, release: str) -> str:
    """The package of the running kernel's build tree (`/lib/modules/<release>/build`) on the distribution."""
    return "%s-%s" % (PERSONALITIES[os_name]["headers_package"], release)


def dkms_mok(os_name: str) -> tuple:
    """(private key, certificate) the distribution's DKMS signs modules with."""
    return PERSONALITIES[os_name]["dkms_mok"]


def fleet_os(os_list: list, count: int) -> list:
    """The personality of each of `count` nodes: `os_list` in turn (`[ubuntu2204, rocky9]` -> u, r, u, r, ...)."""
    chosen = list(os_list or [DEFAULT_OS])
    unknown = [name for name in chosen if name not in PERSONALITIES]
    if unknown:
        raise ValueError("unknown --os %s (known: %s)" % (", ".join(unknown), ", ".join(OS_NAMES)))
    return [chosen[index % len(chosen)] for index in range(count)]


def _whiteout(path: str) -> None:
    """An overlayfs whiteout: the lower (host) file is absent from the node's view."""
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(0, 0))


def rocky_repo_files(baseurl: str, key: str) -> dict:
    """Rocky 9's `rocky.repo` BaseOS section (on the twin's mirror instead of Rocky's mirror list) and its key."""
    return {"/etc/yum.repos.d/rocky.repo": (
        "[baseos]\nname=Rocky Linux $releasever - BaseOS\nbaseurl=%s\ngpgcheck=1\nenabled=1\ncountme=1\n"
        "metadata_expire=6h\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n" % baseurl),
        "/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9": key}


def write_identity(upper_dir: str, os_name: str, rocky_repo: dict | None = None) -> None:
    """Write the personality's files into a node's overlay upper dir (before its first boot); a Rocky node's
    BaseOS repository is `rocky_repo` ({"baseurl", "key"}: the twin's mirror) when given."""
    personality = PERSONALITIES[os_name]
    files = dict(personality["files"])
    if personality["package_manager"] == "dnf" and rocky_repo:
        files.update(rocky_repo_files(rocky_repo["baseurl"], rocky_repo["key"]))
    for path in personality["dirs"]:
        os.makedirs(os.path.join(upper_dir, path.lstrip("/")), mode=0o755, exist_ok=True)
    for path, text in files.items():
        target = os.path.join(upper_dir, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.unlink(target)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(target, 0o644)
    for path in personality["hidden"]:
        target = os.path.join(upper_dir, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _whiteout(target)
