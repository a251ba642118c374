"""Running tenants: the dispatcher (queues, slots, admission) and the
launchers that run a placed command in its mode, one folder per mode
(process/, pooled/, forked/, forwarded/), each mode's worker pool standing on
the one base in workers/, and the node's pools built and asked together
(pools.py). The host plumbing they stand on (cgroups, process trees,
identities, the tenant registry, fair share) is krex_runtime/host/."""
