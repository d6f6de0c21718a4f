"""The chaos harness's ssh-cut (benchmarks/chaos_faults.py): the established SSH connection to a node twin is cut
while its command runs (the sshd serving it killed), and the node's sshd still serves the next connection."""
from __future__ import annotations

import os
import subprocess
import sys
import time

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)

from chaos_faults import cut_ssh_connections  # noqa: E402


def test_an_established_ssh_connection_is_cut_mid_command_and_the_next_one_is_served(lab):
    node = lab.node_names[0]
    running = subprocess.Popen(["ssh", "-F", os.path.join(lab.state_dir, "ssh_config"), "-o", "ControlMaster=no",
                                node, "echo started; sleep 60; echo finished"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline().strip() == "started"
        killed = cut_ssh_connections(lab.state_dir, node)
        assert killed
        started = time.monotonic()
        out, _err = running.communicate(timeout=30)
        assert time.monotonic() - started < 30
        assert running.returncode == 255 and "finished" not in out
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert lab.ssh(node, "echo again").stdout.strip() == "again"
