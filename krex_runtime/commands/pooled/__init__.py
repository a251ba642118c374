"""Pooled mode: per-GPU pools of persistent context processes (pooled_pool.py), each
running pooled commands one at a time (pooled_worker.py)."""
