"""Forked mode: a zygote per GPU, the preloaded parent commands are forked from
(forked_pool.py), and one forked command followed like a process (forked_run.py)."""
