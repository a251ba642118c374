"""Exclusivity: the region channel tenants ask on, the region manager (the
one front door: grant, release, withdraw, lease lookups) over each GPU's
queue that grants its regions (region_entry.py: gate, drain, freeze, pin;
exit in reverse), the gate in shared memory and its backends (gate/), the
entry's steps (entry/), the freezer, whole-device leases and the tenants'
channel tokens. It stands beside commands/, on host/."""
