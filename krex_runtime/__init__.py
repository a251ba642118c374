"""KREX runtime: region-granular GPU exclusivity for concurrent kernel benchmarking.

The folders are the parts (docs/architecture.md draws them): wire (what
clients and the console speak), node (configuration, GPUs, files), commands
(running tenants), regions (exclusivity), telemetry, service (the process
that ties them together), tenant (code that runs inside tenants), sim (the
simulated driver's bindings), testing and demo (support, not the service).

Kept empty of imports: every tenant imports this package for `region()`.
"""
