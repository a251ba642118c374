"""Pooled mode: per-GPU pools of persistent context processes (pool.py), each
running pooled commands one at a time (worker.py)."""
