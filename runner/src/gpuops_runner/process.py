"""The runner owns its playbook. ansible-runner starts ansible-playbook through pexpect in a session of its own
that ignores SIGHUP, and ansible-playbook's workers detach into sessions of their own (``os.setsid``), so neither
a dead runner nor a signal to one process group ends them all. The runner therefore makes itself the subreaper of
its descendants (Linux ``PR_SET_CHILD_SUBREAPER``: orphans are reparented to it, not to PID 1) and, when it
fails, is stopped or is done, ends every process of the tree it started."""

from __future__ import annotations

import ctypes
import glob
import os
import signal
import time

STOP_GRACE_S = 10.0
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Make orphaned descendants this process's children (True when the kernel agreed)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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


def tree(pids):
    """``pids`` and all their descendants."""
    found, pending = [], list(pids)
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.append(pid)
            pending.extend(child_pids(pid))
    return found


def _alive(pid):
    """Running (a zombie is reaped when it is our child, and counts as gone)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _signal_all(pids, signum):
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            pass


def stop_tree(pids, grace_s=STOP_GRACE_S):
    """SIGTERM ``pids`` and their descendants (ansible-playbook stops its workers and ends), SIGKILL what is left
    after ``grace_s``. Returns the pids that were running."""
    running = [pid for pid in tree(pids) if _alive(pid)]
    _signal_all(running, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in running):
        time.sleep(0.1)
    left = [pid for pid in tree(running) if _alive(pid)]
    _signal_all(left, signal.SIGKILL)
    for pid in left:
        _alive(pid)
    return running


def stop_new_children(before, grace_s=STOP_GRACE_S, rounds=5):
    """Stop every child of this process that is not in ``before``, with its tree, until none is left (orphans of a
    stopped tree are reparented to us while it stops). Returns the pids that were running."""
    stopped = []
    for _round in range(rounds):
        new = [pid for pid in child_pids() if pid not in before and _alive(pid)]
        if not new:
            break
        stopped += stop_tree(new, grace_s)
    return stopped
