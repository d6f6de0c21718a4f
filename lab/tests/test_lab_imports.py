"""The twin's import graph: no cycle in lab/gpulab, the API machinery (gpulab.kube.api) independent of the
simulation (gpulab.kube.sim), no production module importing a test helper (hack/check_lab_imports.py)."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(REPO, "hack", "check_lab_imports.py")


def run_check(lab_dir: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHECK, "--lab", lab_dir], capture_output=True, text=True, timeout=60)


def test_the_twin_has_no_import_cycle_and_its_api_does_not_import_the_simulation():
    done = run_check(os.path.join(REPO, "lab"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   no import cycle" in done.stdout
    assert "ok   gpulab.kube.api imports nothing from gpulab.kube.sim" in done.stdout


def write(root, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_the_check_fails_on_a_cycle_an_api_to_sim_import_and_a_test_helper_import(tmp_path):
    for package in ("gpulab", "gpulab/kube", "gpulab/kube/api", "gpulab/kube/sim"):
        write(tmp_path, package + "/__init__.py", "")
    write(tmp_path, "gpulab/a.py", "def f():\n    from gpulab import b\n")     # a lazy import is a dependency too
    write(tmp_path, "gpulab/b.py", "from gpulab.a import f\n")
    write(tmp_path, "gpulab/kube/api/store.py", "from ..sim import kubelet\n")
    write(tmp_path, "gpulab/kube/sim/kubelet.py", "from ..api.store import x\nfrom gpulab.kube import testing\n")
    write(tmp_path, "gpulab/kube/testing.py", "from gpulab.kube.sim import kubelet\n")
    write(tmp_path, "gpulab/testkit/__init__.py", "")
    write(tmp_path, "gpulab/testkit/lab.py", "from gpulab.kube import testing\n")   # test helpers among themselves
    write(tmp_path, "gpulab/daemon.py", "from gpulab.testkit.lab import start_lab\n")
    done = run_check(str(tmp_path))
    assert done.returncode == 1
    failures = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert "FAIL import cycle: gpulab.a <-> gpulab.b" in failures
    assert "FAIL gpulab.kube.api.store imports gpulab.kube.sim.kubelet: the API machinery must not depend on the " \
           "simulation" in failures
    assert "FAIL gpulab.kube.sim.kubelet imports the test helper gpulab.kube.testing" in failures
    assert "FAIL gpulab.daemon imports the test helper gpulab.testkit.lab" in failures
    assert not any("gpulab.testkit.lab imports" in line for line in failures)
