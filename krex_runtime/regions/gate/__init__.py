"""The gate: the per-GPU page in shared memory that holds other tenants' GPU
calls while a region is held (core.py), the files it is made of (files.py),
its layout mirrored from native/include/krex_gate.h (header_layout.py), the
futexes and /proc reads it needs (kernel.py), and the backends that drain
the tenants it holds (backends.py, the driver's lock in driver_lock.py)."""
