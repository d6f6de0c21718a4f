"""What the twin's GPU Operator toolkit operand leaves on a node's disk (`gpulab/nvidia/toolkitoperand.py`), checked
without a lab: the files, the main config's one import, containerd's own reading of the drop-in, and the per-boot
/run/nvidia state only on a node that has the toolkit."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from gpulab.nvidia import toolkitoperand

MAIN = 'version = 2\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n'


def test_install_writes_the_drop_in_the_binaries_and_one_import_of_the_drop_in_directory(tmp_path):
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "etc" / "containerd").mkdir(parents=True)
    (lower / "etc" / "containerd" / "config.toml").write_text(MAIN)
    toolkitoperand.install(str(upper), str(lower))
    toolkitoperand.install(str(upper), str(lower))          # a second install changes nothing more
    main = (upper / "etc" / "containerd" / "config.toml").read_text()
    assert main.count('imports = ["/etc/containerd/conf.d/*.toml"]') == 1
    assert main.startswith('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert (lower / "etc" / "containerd" / "config.toml").read_text() == MAIN      # the lower dir is never written
    for binary in toolkitoperand.BINARIES:
        assert os.access(str(upper / "usr" / "local" / "nvidia" / "toolkit" / binary), os.X_OK), binary
    drop_in = (upper / "etc" / "containerd" / "conf.d" / "99-nvidia.toml").read_text()
    assert 'default_runtime_name = "nvidia"' in drop_in
    assert 'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi"' in drop_in


@pytest.mark.skipif(shutil.which("containerd") is None, reason="no containerd on this machine")
def test_containerd_reads_the_drop_in_with_the_three_nvidia_runtimes(tmp_path):
    path = tmp_path / "99-nvidia.toml"
    path.write_text(toolkitoperand.drop_in_text())
    dump = subprocess.run(["containerd", "--config", str(path), "config", "dump"], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    for name in ("nvidia", "nvidia-cdi", "nvidia-legacy"):
        assert re.search(r'containerd\.runtimes\."?%s"?\]' % name, dump), dump
    assert 'default_runtime_name = "nvidia"' in dump


def test_the_run_state_is_laid_down_only_where_the_toolkit_is_installed(tmp_path):
    assert toolkitoperand.install_run(str(tmp_path)) is False
    assert not (tmp_path / "run").exists()
    toolkitoperand.install(str(tmp_path), str(tmp_path / "no-lower"))
    assert toolkitoperand.install_run(str(tmp_path)) is True
    assert (tmp_path / "run" / "nvidia" / "validations" / "toolkit-ready").exists()
    assert (tmp_path / "run" / "nvidia" / "toolkit" / "nvidia-container-toolkit.pid").exists()
