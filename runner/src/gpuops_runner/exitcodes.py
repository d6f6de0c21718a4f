"""Exit codes of `gpuops` (a pipeline acts on them; docs/runner.md has the table)."""

DONE = 0
USAGE = 2             # bad command line: an option's value (named on stderr), the collection not found
REFUSED = 3           # nothing ran: no ticket, confirmation mismatch, reserved/secret/templated -e, bad inventory, ...
GATE_FAILED = 4       # a gate (task with gpuops_audit_gate) failed on some node
NODE_FAILED = 5       # a step failed on some node or a node was unreachable (no gate failed)
INTERRUPTED = 6       # SIGINT/SIGTERM/SIGHUP, ansible-runner cancelled or timed out the run, or the runner failed
ANSIBLE_ERROR = 7     # ansible-playbook failed without a node result (syntax, inventory, config error)
AUDIT_UNWRITABLE = 8  # the audit trail cannot be written: nothing ran when found before the run

MEANING = {
    DONE: "done",
    USAGE: "usage error",
    REFUSED: "refused",
    GATE_FAILED: "gate failed",
    NODE_FAILED: "node failed",
    INTERRUPTED: "interrupted",
    ANSIBLE_ERROR: "ansible error",
    AUDIT_UNWRITABLE: "audit trail not writable",
}

# gpuops audit verify
INTACT = 0
TAMPERED = 1          # a broken link, an edited signed line, an anchor that is the head of no prefix
UNREADABLE = 2        # the file (or an anchors file) cannot be read, or a bad argument
KEY_PROBLEM = 3       # wrong key, or lines not signed with the given key (unsigned, another key id)
