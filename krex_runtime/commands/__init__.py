"""Running tenants: the dispatcher (queues, slots, admission), one
command's process, the context pool of persistent context processes and
forked mode's zygotes. The host plumbing they stand on (cgroups, process
trees, identities, the tenant registry, fair share) is krex_runtime/host/."""
