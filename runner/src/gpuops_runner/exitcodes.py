"""Exit codes of `gpuops` (a pipeline acts on them; docs/runner.md has the table)."""

DONE = 0
TAMPERED = 1          # gpuops audit verify: the trail is not intact
USAGE = 2             # bad command line (argparse), unreadable file
REFUSED = 3           # nothing ran: no ticket, confirmation mismatch, secret in -e, unknown runbook, ...
GATE_FAILED = 4       # a gate (task with gpuops_audit_gate) failed on some node
NODE_FAILED = 5       # a step failed on some node or a node was unreachable (no gate failed)
INTERRUPTED = 6       # SIGINT/SIGTERM, or ansible-runner cancelled/timed out the run
ANSIBLE_ERROR = 7     # ansible-playbook failed without a node result (syntax, inventory, config error)

MEANING = {
    DONE: "done",
    TAMPERED: "audit trail tampered",
    USAGE: "usage error",
    REFUSED: "refused",
    GATE_FAILED: "gate failed",
    NODE_FAILED: "node failed",
    INTERRUPTED: "interrupted",
    ANSIBLE_ERROR: "ansible error",
}
