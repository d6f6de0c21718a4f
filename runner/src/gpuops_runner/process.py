"""The runner owns its playbook: ansible-runner starts ansible-playbook through pexpect in a session (and process
group) of its own that ignores SIGHUP, so a runner that dies or raises would leave it running unwatched. These
find that process and stop its whole group."""

from __future__ import annotations

import glob
import os
import signal
import time

STOP_GRACE_S = 10.0


def child_pids(pid=None):
    """The direct children of ``pid`` (this process by default), from /proc (Linux)."""
    pid = os.getpid() if pid is None else pid
    children = set()
    for path in glob.glob("/proc/%d/task/*/children" % pid):
        try:
            with open(path, encoding="ascii") as stream:
                children.update(int(child) for child in stream.read().split())
        except OSError:
            continue
    return sorted(children)


def group_leaders(pids):
    """Of ``pids``, those that lead a process group of their own (ansible-runner's pexpect child does)."""
    leaders = []
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:
                leaders.append(pid)
        except OSError:
            continue
    return leaders


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def _reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass


def stop_groups(pgids, grace_s=STOP_GRACE_S):
    """SIGTERM each process group (ansible-playbook stops its workers and ends), SIGKILL what is left after
    ``grace_s``. Returns the groups that were running."""
    running = [pgid for pgid in pgids if _group_alive(pgid)]
    for pgid in running:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        for pgid in running:
            _reap(pgid)
        if not any(_group_alive(pgid) for pgid in running):
            break
        time.sleep(0.1)
    for pgid in running:
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        _reap(pgid)
    return running
