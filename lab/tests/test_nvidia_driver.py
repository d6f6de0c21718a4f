"""The fake runfile installs a real stub driver (kbuild, sign-file, dkms, modinfo are the real tools), and the
boot decision loads it exactly when a real kernel would.

Everything runs in temporary node roots on the host (no node twin needed): the runfile's `--root` points it there,
as `gpulab up --driver` does. Built modules are cached once per session like the lab's `DIR/cache`.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab.nvidia import boot, installer, mok, profiles, runfile, smi  # noqa: E402

OPEN_VERSION = "570.124.06"        # open kernel modules by default (560+)
PROPRIETARY_VERSION = "550.54.15"  # proprietary by default
RELEASE = os.uname().release
BUILD_TIMES_S = {}

pytestmark = pytest.mark.skipif(not os.path.isdir("/usr/src") or not any(
    name.startswith("linux-headers-") for name in os.listdir("/usr/src")), reason="needs linux-headers-amd64")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("kmod-cache"))
    for version, flavor in ((OPEN_VERSION, "open"), (PROPRIETARY_VERSION, "proprietary")):
        started = time.monotonic()
        runfile.prebuild_modules(cache, version, flavor)
        BUILD_TIMES_S[(version, flavor)] = round(time.monotonic() - started, 2)
    return cache


@pytest.fixture(scope="module")
def runfiles(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("runfiles"))
    return {version: runfile.write_runfile(version, directory) for version in (OPEN_VERSION, PROPRIETARY_VERSION,
                                                                                "570.133.07")}


@pytest.fixture(scope="module")
def mok_key(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mok")
    key, cert = str(directory / "MOK.priv"), str(directory / "MOK.der")
    subprocess.run(["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "36500", "-subj",
                    "/CN=gpu-node-01 Secure Boot Module Signature key/", "-keyout", key, "-outform", "DER", "-out",
                    cert], check=True, capture_output=True)
    return {"key": key, "cert": cert}


@pytest.fixture
def node_root(tmp_path):
    root = str(tmp_path / "root")
    os.makedirs(root)
    installer.ensure_kernel_build_link(root)
    return root


@pytest.fixture(scope="module")
def collection(collection_module_utils):
    return collection_module_utils("nvidia.driver_state")


def run_installer(runfile_path: str, root: str, cache: str, *flags, env=None) -> subprocess.CompletedProcess:
    """`sh NVIDIA-Linux-x86_64-<ver>.run <flags>` against a node root, as an operator runs it."""
    return subprocess.run(["sh", runfile_path, "--root", root] + list(flags), capture_output=True, text=True,
                          env=dict(os.environ, GPULAB_KMOD_CACHE=cache, **(env or {})))


def modinfo(path: str) -> dict:
    return boot.read_modinfo(path)


def module_path(root: str, stem: str, subdir: str = "kernel/drivers/video") -> str:
    return os.path.join(root, "lib/modules", RELEASE, subdir, stem + ".ko")


def cert_serial(cert: str) -> str:
    with open(cert, "rb") as handle:
        return mok.certificate_serial_hex(handle.read())


def efi_with(secure_boot: bool, enrolled_certs=()) -> dict:
    state = mok.default_efi_state(efi=True, secure_boot=secure_boot)
    for cert in enrolled_certs:
        with open(cert, "rb") as handle:
            state["enrolled"].append({"der_b64": base64.b64encode(handle.read()).decode()})
    return state


def boot_node(root: str, efi: dict, hw: dict | None = None, faults=()) -> dict:
    """compute_boot_state, then the views written into the root as the node core writes them."""
    hw = hw or profiles.make_hw("gpu-node-01", "h100-sxm-80gb-x8")
    state = boot.compute_boot_state(root, hw, efi, list(faults))
    for directory in ("run/gpulab", "proc/sys/kernel/random"):
        os.makedirs(os.path.join(root, directory), exist_ok=True)
    proc_version = os.path.join(root, "proc/driver/nvidia/version")
    if os.path.exists(proc_version):
        os.unlink(proc_version)
    for path, text in state["files"].items():
        os.makedirs(os.path.dirname(os.path.join(root, path.lstrip("/"))), exist_ok=True)
        with open(os.path.join(root, path.lstrip("/")), "w") as handle:
            handle.write(text)
    with open(os.path.join(root, "run/gpulab/hw.json"), "w") as handle:
        json.dump(hw, handle)
    with open(os.path.join(root, "proc/sys/kernel/random/boot_id"), "w") as handle:
        handle.write("%f\n" % time.time())
    return state


def node_nvidia_smi(root: str, *argv) -> subprocess.CompletedProcess:
    """The /usr/bin/nvidia-smi the runfile installed, run against the node root."""
    return subprocess.run([os.path.join(root, "usr/bin/nvidia-smi")] + list(argv), capture_output=True, text=True,
                          env=dict(os.environ, GPULAB_NODE_ROOT=root))


# ------------------------------------------------------------------------------------------------ installing

def test_runfile_installs_signed_open_modules_that_real_modinfo_reads(node_root, cache_dir, runfiles, mok_key):
    done = run_installer(runfiles[OPEN_VERSION], node_root, cache_dir, "--silent",
                         "--module-signing-secret-key=" + mok_key["key"],
                         "--module-signing-public-key=" + mok_key["cert"])
    assert done.returncode == 0, done.stderr
    for stem in ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm"):
        info = modinfo(module_path(node_root, stem))
        assert info["version"] == OPEN_VERSION and info["license"] == "Dual MIT/GPL"
        assert info["signer"] == "gpu-node-01 Secure Boot Module Signature key"
        assert info["sig_key"] == cert_serial(mok_key["cert"])
    assert modinfo(module_path(node_root, "nvidia-uvm"))["depends"] == "nvidia"
    assert "nvidia/%s/gsp_ga10x.bin" % OPEN_VERSION in modinfo(module_path(node_root, "nvidia"))["firmware"]


def test_runfile_installs_the_userspace_cdi_specs_mount(node_root, cache_dir, runfiles):
    assert run_installer(runfiles[OPEN_VERSION], node_root, cache_dir, "-s").returncode == 0
    lib_dir = os.path.join(node_root, "usr/lib/x86_64-linux-gnu")
    for library in ("libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler"):
        assert os.path.isfile(os.path.join(lib_dir, "%s.so.%s" % (library, OPEN_VERSION)))
        assert os.readlink(os.path.join(lib_dir, library + ".so.1")) == "%s.so.%s" % (library, OPEN_VERSION)
    assert os.path.isfile(os.path.join(node_root, "lib/firmware/nvidia", OPEN_VERSION, "gsp_ga10x.bin"))
    assert os.readlink(os.path.join(node_root, "usr/bin/nvidia-uninstall")) == "nvidia-installer"
    assert smi.userspace_driver_version(node_root) == OPEN_VERSION
    with open(os.path.join(node_root, "var/log/nvidia-installer.log")) as handle:
        assert "installer version: %s" % OPEN_VERSION in handle.read()


def test_module_type_flags_and_branch_defaults_choose_the_licence(node_root, cache_dir, runfiles):
    done = run_installer(runfiles[OPEN_VERSION], node_root, cache_dir, "--silent",
                         "--kernel-module-type=proprietary", "--no-drm")
    assert done.returncode == 0, done.stderr
    assert modinfo(module_path(node_root, "nvidia"))["license"] == "NVIDIA"
    assert not os.path.exists(module_path(node_root, "nvidia-drm"))
    assert run_installer(runfiles[PROPRIETARY_VERSION], node_root, cache_dir, "--silent").returncode == 0
    assert modinfo(module_path(node_root, "nvidia"))["license"] == "NVIDIA"
    assert run_installer(runfiles[PROPRIETARY_VERSION], node_root, cache_dir, "-s", "-m", "kernel-open")\
        .returncode == 0
    assert modinfo(module_path(node_root, "nvidia"))["license"] == "Dual MIT/GPL"


@pytest.mark.usefixtures("needs_root")  # dkms install refuses other users
def test_dkms_install_registers_the_module_which_dkms_builds_and_signs_with_its_mok_key(
        node_root, cache_dir, runfiles, collection, tmp_path):
    dkms_key = {"mok_signing_key": str(tmp_path / "mok.key"), "mok_certificate": str(tmp_path / "mok.pub")}
    done = run_installer(runfiles[OPEN_VERSION], node_root, cache_dir, "--silent", "--dkms", env=dkms_key)
    assert done.returncode == 0, done.stderr
    info = modinfo(module_path(node_root, "nvidia", "updates/dkms"))
    assert info["version"] == OPEN_VERSION and info["signer"] == "DKMS module signing key"
    assert os.path.exists(dkms_key["mok_certificate"])   # dkms made its key, as on a fresh host
    status = subprocess.run(["dkms", "status", "--dkmstree", os.path.join(node_root, "var/lib/dkms")],
                            capture_output=True, text=True, check=True).stdout
    entries = collection.nvidia_dkms_entries(collection.parse_dkms_status(status))
    assert [(e["module"], e["version"], e["kernel"], e["state"]) for e in entries] == \
        [("nvidia", OPEN_VERSION, RELEASE, "installed")]
    assert boot.find_installed_module(node_root, RELEASE).endswith("/updates/dkms/nvidia.ko")


def test_uninstall_removes_everything_the_install_added(node_root, cache_dir, runfiles):
    before = set(os.listdir(node_root))
    assert run_installer(runfiles[OPEN_VERSION], node_root, cache_dir, "-s").returncode == 0
    done = subprocess.run(["sh", runfiles[OPEN_VERSION], "--root", node_root, "--uninstall"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "Uninstallation of existing driver" in done.stdout
    leftovers = [os.path.relpath(os.path.join(d, f), node_root) for d, _dirs, files in os.walk(node_root)
                 for f in files if not f.startswith(("modules.", "nvidia-uninstall.log", "nvidia-installer.log"))]
    assert leftovers == [] and set(os.listdir(node_root)) - before <= {"var", "usr"}
    assert boot.find_installed_module(node_root, RELEASE) is None


def test_missing_kernel_headers_fail_like_the_real_installer(tmp_path, cache_dir, runfiles):
    root = str(tmp_path / "bare")
    os.makedirs(root)
    done = run_installer(runfiles[OPEN_VERSION], root, cache_dir, "--silent")
    assert done.returncode == 1
    assert "ERROR: Unable to find the kernel source tree for the currently running kernel." in done.stderr
    assert "ERROR: Installation has failed." in done.stderr


def test_nouveau_in_use_blocks_the_install_and_disable_nouveau_blacklists_it(node_root, cache_dir, runfiles):
    os.makedirs(os.path.join(node_root, "run/gpulab"))
    with open(os.path.join(node_root, "run/gpulab/modules.json"), "w") as handle:
        json.dump(boot.NOUVEAU_MODULES, handle)
    done = run_installer(runfiles[OPEN_VERSION], node_root, cache_dir, "--silent", "--disable-nouveau")
    assert done.returncode == 1 and "The Nouveau kernel driver is currently in use" in done.stderr
    assert boot.nouveau_blacklisted(node_root)


@pytest.mark.usefixtures("needs_root")  # unshare --mount and dkms install
def test_dkms_fail_fault_makes_the_dkms_build_fail_inside_the_node(node_root, cache_dir, runfiles, tmp_path):
    """In a private mount namespace whose /run/gpulab/faults.json lists dkms-fail (as a node's does), the real dkms
    build of the module fails and the runfile reports it; the runfile's own cached install still works."""
    script = ("mount -t tmpfs gpulab-test /run && mkdir /run/gpulab && echo '[\"dkms-fail\"]' > "
              "/run/gpulab/faults.json && exec sh \"$0\" \"$@\"")
    env = dict(os.environ, GPULAB_KMOD_CACHE=cache_dir, mok_signing_key=str(tmp_path / "mok.key"),
               mok_certificate=str(tmp_path / "mok.pub"))
    broken = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                             runfiles[OPEN_VERSION], "--root", node_root, "--silent", "--dkms"],
                            capture_output=True, text=True, env=env)
    assert broken.returncode == 1 and "ERROR: 'dkms install" in broken.stderr
    make_log = os.path.join(node_root, "var/lib/dkms/nvidia", OPEN_VERSION, "build/make.log")
    assert "make.log for more information" in broken.stderr
    with open(make_log) as handle:
        assert "gpulab fault dkms-fail: nvidia-%s does not build against this kernel" % OPEN_VERSION in handle.read()
    assert boot.find_installed_module(node_root, RELEASE) is None
    cached = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                             runfiles[OPEN_VERSION], "--root", node_root, "--silent"],
                            capture_output=True, text=True, env=env)
    assert cached.returncode == 0, cached.stderr


# -------------------------------------------------------------------------------------------------- booting

def installed(root, cache, runfile_path, *flags):
    done = run_installer(runfile_path, root, cache, "--silent", *flags)
    assert done.returncode == 0, done.stderr


def test_secure_boot_off_loads_an_unsigned_module_and_taints_the_kernel(node_root, cache_dir, runfiles):
    installed(node_root, cache_dir, runfiles[OPEN_VERSION])
    state = boot_node(node_root, efi_with(secure_boot=False))
    assert state["module_loaded"] and state["kernel_driver_version"] == OPEN_VERSION
    assert "nvidia: module verification failed: signature and/or required key missing - tainting kernel" in \
        state["kmsg"]
    assert any(line.startswith("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build"
                               % OPEN_VERSION) for line in state["kmsg"])
    assert [d["path"] for d in state["dev_nodes"][:3]] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]
    assert {d["driver"] for d in state["pci_devices"]} == {"nvidia"} and len(state["pci_devices"]) == 8
    assert [m["name"] for m in state["modules"]] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    listed = node_nvidia_smi(node_root, "-L")
    assert listed.returncode == 0 and listed.stdout.count("NVIDIA H100 80GB HBM3") == 8


def test_secure_boot_on_rejects_an_unsigned_module_and_nvidia_smi_cannot_talk_to_the_driver(
        node_root, cache_dir, runfiles):
    installed(node_root, cache_dir, runfiles[OPEN_VERSION])
    state = boot_node(node_root, efi_with(secure_boot=True))
    assert not state["module_loaded"] and state["module_rejected"]
    assert "Loading of unsigned module is rejected" in state["kmsg"]
    assert state["dev_nodes"] == [] and {d["driver"] for d in state["pci_devices"]} == {None}
    done = node_nvidia_smi(node_root)
    assert done.returncode == 9 and "couldn't communicate with the NVIDIA driver" in done.stdout


def test_secure_boot_on_rejects_a_module_signed_with_a_key_that_is_not_enrolled(
        node_root, cache_dir, runfiles, mok_key):
    installed(node_root, cache_dir, runfiles[OPEN_VERSION], "--module-signing-secret-key", mok_key["key"],
              "--module-signing-public-key", mok_key["cert"])
    state = boot_node(node_root, efi_with(secure_boot=True))
    assert not state["module_loaded"] and "Loading of module with unavailable key is rejected" in state["kmsg"]


def test_secure_boot_on_loads_a_module_whose_signer_was_enrolled_through_mokutil(
        node_root, cache_dir, runfiles, mok_key, tmp_path):
    installed(node_root, cache_dir, runfiles[OPEN_VERSION], "--module-signing-secret-key", mok_key["key"],
              "--module-signing-public-key", mok_key["cert"])
    efi_path = str(tmp_path / "efi.json")
    mok.save_efi_state(efi_path, efi_with(secure_boot=True))
    assert mok.run(["--import", mok_key["cert"], "--root-pw"], efi_path) == 0
    staged = mok.load_efi_state(efi_path)
    assert not boot_node(node_root, staged)["module_loaded"]            # nobody at the console: key dropped
    mok.run(["--import", mok_key["cert"], "--root-pw"], efi_path)
    confirmed = dict(mok.load_efi_state(efi_path), pending_confirmed=True)  # `gpulab mok-confirm`
    state = boot_node(node_root, confirmed)
    assert state["module_loaded"] and len(state["efi"]["enrolled"]) == 1
    assert "nvidia: module verification failed: signature and/or required key missing - tainting kernel" not in \
        state["kmsg"]


def test_replacing_only_the_userspace_gives_a_version_mismatch_after_boot(node_root, cache_dir, runfiles):
    installed(node_root, cache_dir, runfiles[OPEN_VERSION])
    installed(node_root, cache_dir, runfiles["570.133.07"], "--no-kernel-modules")
    state = boot_node(node_root, efi_with(secure_boot=False))
    assert state["kernel_driver_version"] == OPEN_VERSION
    done = node_nvidia_smi(node_root, "-q", "-x")
    assert done.returncode == 18 and done.stdout == "Failed to initialize NVML: Driver/library version mismatch\n"
    with open(os.path.join(node_root, "var/lib/nvidia/manifest.json")) as handle:
        manifest = json.load(handle)
    assert (manifest["kernel_module_version"], manifest["userspace_version"]) == (OPEN_VERSION, "570.133.07")


def test_driver_mismatch_fault_loads_the_previous_module_version(node_root, cache_dir, runfiles):
    installed(node_root, cache_dir, runfiles[OPEN_VERSION])
    state = boot_node(node_root, efi_with(secure_boot=False), faults=["driver-mismatch"])
    assert state["module_loaded"] and state["kernel_driver_version"] != OPEN_VERSION
    assert node_nvidia_smi(node_root, "-L").returncode == 18


def test_without_a_driver_and_no_blacklist_nouveau_takes_the_gpus(node_root):
    state = boot_node(node_root, efi_with(secure_boot=True))
    assert state["nouveau_loaded"] and not state["module_loaded"]
    assert {d["driver"] for d in state["pci_devices"]} == {"nouveau"}
    assert [m["name"] for m in state["modules"]][0] == "nouveau"
    assert os.path.islink(os.path.join(node_root, "lib/modules", RELEASE, "build"))


def test_collection_reads_the_installed_module_with_real_modinfo(node_root, cache_dir, runfiles, mok_key,
                                                                 collection):
    installed(node_root, cache_dir, runfiles[PROPRIETARY_VERSION], "--module-signing-secret-key", mok_key["key"],
              "--module-signing-public-key", mok_key["cert"])
    state = boot_node(node_root, efi_with(secure_boot=True, enrolled_certs=[mok_key["cert"]]))
    text = subprocess.run(["modinfo", state["kernel_module_path"]], capture_output=True, text=True,
                          check=True).stdout
    module = collection.build_kernel_module(True, collection.parse_proc_version(
        state["files"]["/proc/driver/nvidia/version"]), collection.parse_modinfo(text), ["nvidia_uvm"])
    assert (module["version"], module["flavor"], module["license"]) == (PROPRIETARY_VERSION, "proprietary", "NVIDIA")
    assert module["signer"] == "gpu-node-01 Secure Boot Module Signature key"
    assert module["sig_key"] == cert_serial(mok_key["cert"])


def test_preinstall_puts_a_driver_into_a_node_root_from_the_cache_quickly(node_root, cache_dir):
    started = time.monotonic()
    manifest = installer.preinstall(node_root, OPEN_VERSION, cache_dir)
    install_s = time.monotonic() - started
    assert manifest["version"] == OPEN_VERSION and manifest["flavor"] == "open"
    assert boot.find_installed_module(node_root, RELEASE).endswith("/kernel/drivers/video/nvidia.ko")
    assert install_s < 10, "cached install took %.1fs" % install_s
    print("\nstub module builds (s): %s; cached install: %.2fs" % (BUILD_TIMES_S, install_s))
