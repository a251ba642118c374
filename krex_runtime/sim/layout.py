"""The binary contract with native/include/krex_simcuda.h, in one place.

Environment names, the shared device file's and the execution log's struct
layouts, record kinds and the CUresult values the bindings check for. The
device-file reader, the log reader and the driver client all read them from
here; a test compiles the header and compares sizes and offsets.
"""

from __future__ import annotations

import struct

ENV_DEVICE = "KREX_SIM_DEVICE"
ENV_GPUS = "KREX_SIM_GPUS"
ENV_LOG = "KREX_SIM_LOG"
ENV_TENANT = "KREX_TENANT_ID"
ENV_MEM_MB = "KREX_SIM_MEM_MB"
ENV_COPY_MBPS = "KREX_SIM_COPY_MBPS"
ENV_HEAT = "KREX_SIM_HEAT"
DEFAULT_DEVICE_NAME = "default"
SHM_DIR = "/dev/shm"
SHM_FILE_PREFIX = "krex-sim-"

SHM_MAGIC = 0x314D49535845524B  # b"KREXSIM1" little-endian
SHM_VERSION = 4
MAX_DEVICES = 16
MAX_PROCS = 512

# Heat and the SM clock (the header's "Heat and the SM clock"; sim/heat.py)
TOP_SM_CLOCK_MHZ = 1980
BASE_SM_CLOCK_MHZ = 1800
AMBIENT_C = 30
LOAD_RISE_C = 55
HEAT_TAU_MS = 5000
HEAT_STEP_NS = 10_000_000
BOOST_KNEE_C = 40
BOOST_BIN_C = 3
BOOST_BIN_MHZ = 15

# struct krex_sim_shm header: magic, version, ready, num_devices, max_procs,
# copy_mbps, heat, reserved1[5]
SHM_HEADER = struct.Struct("<QIIIIII5Q")
# struct krex_sim_device_info: uuid[16], name[64], total_mem, reserved[5]
DEVICE_INFO = struct.Struct("<16s64sQ5Q")
# struct krex_sim_proc_slot
PROC_SLOT = struct.Struct(f"<iIQiIIIiI{MAX_DEVICES}I{MAX_DEVICES}QIIQ{MAX_DEVICES}QQ")
PROC_SLOT_FIELDS = (
    "pid", "lock_word", "start_time", "locker_pid", "in_call", "inflight",
    "drain_seq", "tenant_id", "reserved0",
)
# struct krex_sim_device_load: seq_start, step_lock, busy_ns, heat_ns,
# heat_busy_ns, temp_mc, sm_clock_mhz, reserved[2], reserved1, seq_end
DEVICE_LOAD = struct.Struct("<IiQQQiI2QII")
# struct krex_sim_reaped: seq, pid, tenant_id, start_time, last_work_ns,
# devices_used, reserved0, work_items[MAX_DEVICES]
REAPED_MAX = 64
REAPED = struct.Struct(f"<QiiQQII{MAX_DEVICES}Q")
DEVICES_OFFSET = SHM_HEADER.size
PROCS_OFFSET = DEVICES_OFFSET + MAX_DEVICES * DEVICE_INFO.size
LOAD_OFFSET = PROCS_OFFSET + MAX_PROCS * PROC_SLOT.size
REAPED_SEQ_OFFSET = LOAD_OFFSET + MAX_DEVICES * DEVICE_LOAD.size  # then reserved2[7]
REAPED_OFFSET = REAPED_SEQ_OFFSET + 8 * 8
SHM_SIZE = REAPED_OFFSET + REAPED_MAX * REAPED.size

LOG_MAGIC = 0x474C534B  # b"KSLG" little-endian
LOG_VERSION = 1
LOG_NAME_LEN = 40
# struct krex_sim_log_record (packed, 128 bytes)
LOG_RECORD = struct.Struct(f"<IHHiiiiQQQQQ3I3I{LOG_NAME_LEN}s")
LOG_RECORD_FIELDS = (
    "magic", "version", "kind", "pid", "tenant_id", "device", "target_pid",
    "stream_id", "start_ns", "end_ns", "solo_ns", "bytes", "grid", "block", "name",
)

KIND_KERNEL = 1
KIND_MEMCPY_HTOD = 2
KIND_MEMCPY_DTOH = 3
KIND_MEMCPY_DTOD = 4
KIND_MEMSET = 5
KIND_LOCK = 6
KIND_UNLOCK = 7
KIND_LOCK_TIMEOUT = 8
KIND_HOST_FUNC = 9
KIND_NAMES = {
    KIND_KERNEL: "kernel", KIND_MEMCPY_HTOD: "memcpy_htod", KIND_MEMCPY_DTOH: "memcpy_dtoh",
    KIND_MEMCPY_DTOD: "memcpy_dtod", KIND_MEMSET: "memset", KIND_LOCK: "lock",
    KIND_UNLOCK: "unlock", KIND_LOCK_TIMEOUT: "lock_timeout", KIND_HOST_FUNC: "host_func",
}

# A few CUresult values and driver constants used here.
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_STATE = 401
CUDA_ERROR_TIMEOUT = 909
CUDA_ERROR_NOT_SUPPORTED = 801
CU_PROCESS_STATE_RUNNING = 0
CU_PROCESS_STATE_LOCKED = 1
CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1
CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2
CU_EVENT_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1
