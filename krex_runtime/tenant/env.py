"""The environment variables a tenant gets from the runtime, by name.

Standard library only and free of logic: the runtime's environment builder
(krex_runtime/commands/environment.py) writes these and the tenant-side code
(the region client, the context worker) reads them, so both name them here.
"""

GPU = "KREX_GPU"  # the GPU index on this node (the first of a set)
GPUS = "KREX_GPUS"  # a command placed on several GPUs: their indices, comma-separated, ascending
GPU_UUID = "KREX_GPU_UUID"
GPU_VENDOR = "KREX_GPU_VENDOR"  # "nvidia" or "amd": whose GPU it is (which library and runtime it uses)
COMMAND_ID = "KREX_COMMAND_ID"  # the command (or context process) this process belongs to
TENANT_ID = "KREX_TENANT_ID"  # its tenant id: gate slot, region requests
ENDPOINT = "KREX_ENDPOINT"  # the runtime's read-only control socket
RUN_DIR = "KREX_RUN_DIR"
GATE_PATH = "KREX_GATE_PATH"  # the GPU's gate in shared memory (policy krex)
GATE_SET = "KREX_GATE_SET"  # a set of GPUs: every one's gate, ':'-separated, ascending (native/include/krex_gate.h)
REGION_SOCKET = "KREX_REGION_SOCKET"  # where region() asks (policy krex); absent: region() is a no-op
REGION_TOKEN = "KREX_REGION_TOKEN"  # the tenant's secret for the region channel's HELLO
AUTO_REGION = "KREX_AUTO_REGION"  # "1": timing harnesses run in regions (tenant/auto_region.py)
AUTO_REGION_ENTRIES = "KREX_AUTO_REGION_ENTRIES"  # more entry points than the built-in ones, comma-separated
AUTO_REGION_REPORT = "KREX_AUTO_REGION_REPORT"  # the file the tenant lists what it wrapped in
UNPROTECTED_TIMINGS = "KREX_UNPROTECTED_TIMINGS"  # policy krex: the file the interception library counts them in
COMPILE_SLOTS = "KREX_COMPILE_SLOTS"  # the node's compile slots folder: lock one of its files around a compile
# The simulator's own settings are named with its bindings (krex_runtime/sim/layout.py).
