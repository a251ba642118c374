"""Forwarded mode: per-GPU pools of context servers (pool.py), one forwarded
command and what its end says (run.py), and the shared-memory segment its
driver calls cross (ring.py)."""
