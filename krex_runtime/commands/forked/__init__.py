"""Forked mode: a zygote per GPU, the preloaded parent commands are forked from
(pool.py), and one forked command followed like a process (run.py)."""
