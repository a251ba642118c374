"""The steps a region's entry takes on its GPU, in the order it takes them
(steps.py runs them, unwinding what they took when one fails): wait for
host-side calls, close the gate, quiesce (quiesce.py, checking what entries
claim against the GPU: hints.py), drain, freeze the other tenants
(freezer.py; those still inside a host-side call once out of it:
late_freeze.py; those the gate cannot hold: hold_processes.py), pin the
measuring thread to its reserved cores (cpu_slices.py), settle (settle.py)."""
