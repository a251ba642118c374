"""Host plumbing that both the commands and the regions stand on: cgroups,
process trees, tenant identities (a uid of its own, and what it leaves
behind), the registry of running tenants and the fair-share rule. It knows
nothing of how a command is launched or how a region is granted."""
