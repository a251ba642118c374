"""Forwarded mode: per-GPU pools of context servers (forwarded_pool.py), one forwarded
command and what its end says (forwarded_run.py), and the shared-memory segment its
driver calls cross (forward_ring.py)."""
