"""Exclusivity: the region channel tenants ask on, the region manager
that grants regions per GPU (gate, drain, freeze, pin; exit in reverse), the
gate in shared memory and its backends, the freezer, CPU slices, the driver
lock, whole-device leases and the tenants' channel tokens."""
