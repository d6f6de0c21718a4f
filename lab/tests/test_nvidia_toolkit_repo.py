"""The twin's mirror of NVIDIA's libnvidia-container repository is one apt trusts only with its key: real
`apt-get update` verifies its signature and resolves the toolkit's packages by NVIDIA's names, versions and
dependencies; its `nvidia-ctk cdi generate` writes a spec the collection's CDI validator accepts, from the
driver and GPUs NVML would show, and fails as NVML does without a loaded driver."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
import yaml

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab.nvidia import ctk, installer, nvrepos, profiles, smi, toolkit_debs  # noqa: E402

DRIVER = "615.71.09"
pytestmark = pytest.mark.skipif(not all(os.path.exists("/usr/bin/" + tool) for tool in
                                        ("dpkg-scanpackages", "gpg", "apt-get")),
                                reason="needs dpkg-dev, gpg and apt")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    served = nvrepos.PackageMirror(str(tmp_path_factory.mktemp("nvidia-repos"))).start()
    yield served
    served.stop()


def apt(tmp_path, source_line: str, *argv: str) -> subprocess.CompletedProcess:
    """apt-get/apt-cache with a private state, cache, source list and no installed package (the host's apt is
    untouched)."""
    for sub in ("state/lists/partial", "cache/archives/partial"):
        os.makedirs(tmp_path / sub, exist_ok=True)
    (tmp_path / "sources.list").write_text(source_line + "\n")
    (tmp_path / "status").write_text("")
    options = ["-o", "Dir::Etc::SourceList=%s" % (tmp_path / "sources.list"),
               "-o", "Dir::Etc::SourceParts=/nonexistent",
               "-o", "Dir::State=%s" % (tmp_path / "state"), "-o", "Dir::State::status=%s" % (tmp_path / "status"),
               "-o", "Dir::Cache=%s" % (tmp_path / "cache")]
    return subprocess.run([argv[0]] + options + list(argv[1:]), capture_output=True, text=True, timeout=120)


def source_line(mirror, keyring: str) -> str:
    base = mirror.inventory_vars()["container_runtime_toolkit_repo_base_url"]
    return "deb [signed-by=%s] %s/stable/deb/$(ARCH) /" % (keyring, base)


def test_apt_trusts_the_mirror_with_its_key_and_resolves_nvidias_package_names(mirror, tmp_path):
    keyring = tmp_path / "nvidia-container-toolkit-keyring.asc"
    with urllib.request.urlopen(mirror.inventory_vars()["container_runtime_toolkit_repo_key_url"]) as answer:
        keyring.write_bytes(answer.read())
    assert keyring.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    update = apt(tmp_path, source_line(mirror, str(keyring)), "apt-get", "update")
    assert update.returncode == 0 and "InRelease" in update.stdout, update.stdout + update.stderr
    shown = apt(tmp_path, source_line(mirror, str(keyring)), "apt-cache", "show", "nvidia-container-toolkit").stdout
    assert "Version: 1.17.8-1" in shown
    assert ("Depends: nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (= 1.17.8-1), "
            "libnvidia-container-tools (<< 2.0.0)") in shown
    names = apt(tmp_path, source_line(mirror, str(keyring)), "apt-cache", "pkgnames").stdout.split()
    assert sorted(names) == ["libnvidia-container-tools", "libnvidia-container1", "nvidia-container-toolkit",
                             "nvidia-container-toolkit-base"]


def test_apt_refuses_the_mirror_with_another_key(mirror, tmp_path):
    other_repo = tmp_path / "repo"
    other_repo.mkdir()
    (other_repo / "Release").write_text("Origin: other\n")
    nvrepos.sign_flat_repo(str(other_repo), str(tmp_path / "other.asc"))
    update = apt(tmp_path, source_line(mirror, str(tmp_path / "other.asc")), "apt-get", "update")
    assert "NO_PUBKEY" in update.stderr and "is not signed" in update.stderr, update.stderr


def test_toolkit_base_ships_nvidia_ctk_and_the_runtime(tmp_path):
    built = toolkit_debs.build_packages(str(tmp_path), "1.17.8")
    paths = {os.path.basename(path).split("_")[0]: path for path in built}
    listing = subprocess.run(["dpkg-deb", "--contents", paths["nvidia-container-toolkit-base"]], capture_output=True,
                             text=True, check=True).stdout
    for program in ("./usr/bin/nvidia-ctk", "./usr/bin/nvidia-container-runtime", "./usr/bin/nvidia-cdi-hook",
                    "./etc/nvidia-container-runtime/config.toml"):
        assert program in listing
    assert os.path.basename(paths["libnvidia-container1"]) == "libnvidia-container1_1.17.8-1_amd64.deb"


@pytest.fixture()
def node_root(tmp_path):
    """A node's files as NVML and nvidia-ctk read them: hw.json, a loaded 615 driver, its libraries and devices."""
    root = tmp_path / "node"
    (root / "run/gpulab").mkdir(parents=True)
    (root / "run/gpulab/hw.json").write_text(json.dumps(profiles.make_hw("gpu-node-01", "h100-sxm-80gb-x8")))
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n" % DRIVER)
    lib_dir = root / installer.LIB_DIR.lstrip("/")
    lib_dir.mkdir(parents=True)
    for library in ("libnvidia-ml", "libcuda"):
        (lib_dir / ("%s.so.%s" % (library, DRIVER))).write_text("stub\n")
        os.symlink("%s.so.%s" % (library, DRIVER), str(lib_dir / ("%s.so.1" % library)))
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("stub\n")
    (root / "dev").mkdir()
    for device in ["nvidiactl", "nvidia-uvm"] + ["nvidia%d" % index for index in range(8)]:
        (root / "dev" / device).write_text("")
    return str(root)


def test_cdi_generate_names_every_gpu_by_index_and_uuid_and_mounts_the_driver(node_root, collection_module_utils):
    cdi = collection_module_utils("nvidia.cdi")
    spec = yaml.safe_load(ctk.to_yaml(ctk.generate_spec(node_root)))
    assert cdi.validate_spec(spec) == []
    uuids = [gpu["uuid"] for gpu in smi.visible_gpus(smi.load_node_hw(node_root))]
    names = [device["name"] for device in spec["devices"]]
    assert names == [name for index, uuid in enumerate(uuids) for name in (str(index), uuid)] + ["all"]
    assert [node["path"] for node in spec["devices"][-1]["containerEdits"]["deviceNodes"]] == \
        ["/dev/nvidia%d" % index for index in range(8)]
    edits = spec["containerEdits"]
    assert [node["path"] for node in edits["deviceNodes"]] == ["/dev/nvidia-uvm", "/dev/nvidiactl"]
    assert [mount["containerPath"] for mount in edits["mounts"]] == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.%s" % DRIVER, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % DRIVER,
        "/usr/bin/nvidia-smi"]
    assert ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=%s" % DRIVER] in \
        [hook["args"] for hook in edits["hooks"]]


def test_cdi_generate_fails_as_nvml_does_without_a_loaded_driver(node_root, capsys, monkeypatch):
    os.unlink(os.path.join(node_root, "proc/driver/nvidia/version"))
    monkeypatch.setenv("GPULAB_NODE_ROOT", node_root)
    assert ctk.main(["cdi", "generate", "--format", "json"]) == 1
    assert "failed to initialize NVML: ERROR_DRIVER_NOT_LOADED" in capsys.readouterr().err


def test_cdi_generate_writes_the_output_file_with_the_vendor_and_class_asked(node_root, monkeypatch):
    monkeypatch.setenv("GPULAB_NODE_ROOT", node_root)
    assert ctk.main(["cdi", "generate", "--output=/etc/cdi/example.json", "--vendor", "example.com",
                     "--class", "device", "--device-name-strategy", "index"]) == 0
    with open(os.path.join(node_root, "etc/cdi/example.json")) as handle:
        spec = json.load(handle)
    assert spec["kind"] == "example.com/device"
    assert [device["name"] for device in spec["devices"]] == [str(index) for index in range(8)] + ["all"]
