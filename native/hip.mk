# AMD GPUs: the HIP interception library and the simulated HIP runtime.
# Included by native/Makefile (CC, CFLAGS, BUILD come from it; intercept.mk
# and simcuda.mk before it: this fragment links their objects).
#
#   make -C native                       also build/libkrex_hip.so and build/sim/libamdhip64.so.5
#   make -C native hip-gated-table       regenerate src/hip_intercept/hip_gated_table.c (+ hip_cxx_names.h)
#   make -C native check-hip-gated-table fail if they are out of date with the HIP headers
#   make -C native hip-tests             C test programs (HIP tenants) under $(BUILD)/tests
#
# Built against the real HIP headers (hip/hip_runtime_api.h: Debian's
# libamdhip64-dev, or a ROCm install: HIP_INCLUDE=/opt/rocm/include). Like
# libkrex.so, libkrex_hip.so links no GPU library: it finds libamdhip64 at run
# time. It shares the gate, drain, region client, stats, events, integrity
# and interposition core with libkrex.so by linking the same objects.
HIP_INCLUDE ?= $(patsubst %/hip/hip_runtime_api.h,%,$(firstword $(wildcard /usr/include/hip/hip_runtime_api.h \
	/opt/rocm/include/hip/hip_runtime_api.h)))
CXX ?= c++
HIP_CFLAGS_EXTRA = -D__HIP_PLATFORM_AMD__ $(if $(HIP_INCLUDE),-I$(HIP_INCLUDE))

# The vendor-neutral part of src/intercept, as compiled for libkrex.so.
KREX_SHARED_NAMES := drain gate gate_attach gate_futex intercept intercept_events intercept_integrity intercept_timing \
	intercept_log intercept_stats region_api
KREX_SHARED_OBJS := $(patsubst %,$(KREX_OBJDIR)/%.o,$(KREX_SHARED_NAMES))

KREX_HIP_SRC_DIR := src/hip_intercept
KREX_HIP_SRCS := $(sort $(wildcard $(KREX_HIP_SRC_DIR)/*.c))
KREX_HIP_OBJDIR := $(BUILD)/obj-krex-hip
KREX_HIP_OBJS := $(patsubst $(KREX_HIP_SRC_DIR)/%.c,$(KREX_HIP_OBJDIR)/%.o,$(KREX_HIP_SRCS))
KREX_HIP_CFLAGS = $(CFLAGS) $(HIP_CFLAGS_EXTRA) -I$(KREX_SRC_DIR) -fvisibility=hidden

.PHONY: hip-headers hip-gated-table check-hip-gated-table hip-tests
# An NVIDIA-only node (no HIP headers) builds everything else: the AMD parts
# are named, not failed. `make hip` asks for them and fails without headers.
.PHONY: hip
hip: $(BUILD)/libkrex_hip.so $(BUILD)/sim/libamdhip64.so
ifneq ($(HIP_INCLUDE),)
all: hip
else
all:
	@echo "native: HIP headers not found: libkrex_hip.so and the simulated HIP runtime not built (apt-get install libamdhip64-dev, or set HIP_INCLUDE)"
endif

hip-headers:
	@test -n "$(HIP_INCLUDE)" -a -f "$(HIP_INCLUDE)/hip/hip_runtime_api.h" || { echo "HIP headers not found \
	(hip/hip_runtime_api.h): apt-get install libamdhip64-dev, or set HIP_INCLUDE" >&2; exit 1; }

$(BUILD)/libkrex_hip.so: $(KREX_SHARED_OBJS) $(KREX_HIP_OBJS)
	$(CC) $(KREX_HIP_CFLAGS) -shared -Wl,-soname,libkrex_hip.so -o $@ $^ -ldl -pthread

$(KREX_HIP_OBJDIR)/%.o: $(KREX_HIP_SRC_DIR)/%.c $(wildcard $(KREX_HIP_SRC_DIR)/*.h) $(KREX_HDRS) hip.mk | hip-headers
	@mkdir -p $(dir $@)
	$(CC) $(KREX_HIP_CFLAGS) -c -o $@ $<

hip-gated-table:
	$(PYTHON) tools/gen_hip_gated_table.py --hip-include $(HIP_INCLUDE) --cc $(CC) --cxx $(CXX)

check-hip-gated-table:
	$(PYTHON) tools/gen_hip_gated_table.py --hip-include $(HIP_INCLUDE) --cc $(CC) --cxx $(CXX) --check

# The simulated HIP runtime: $(BUILD)/sim/libamdhip64.so.5 (+ libamdhip64.so),
# a simulator for machines without an AMD GPU. HIP over the simulated CUDA
# driver, as HIP itself runs over CUDA on NVIDIA GPUs: its devices, process
# slots, counters and execution log are the simulated driver's, shared by
# every process of the machine (one simulated device file for both vendors).
SIMHIP_SRC_DIR := src/simhip
SIMHIP_SRCS := $(sort $(wildcard $(SIMHIP_SRC_DIR)/*.c))
SIMHIP_OBJDIR := $(BUILD)/sim/obj-hip
SIMHIP_OBJS := $(patsubst $(SIMHIP_SRC_DIR)/%.c,$(SIMHIP_OBJDIR)/%.o,$(SIMHIP_SRCS))
SIMHIP_CFLAGS = $(CFLAGS) $(HIP_CFLAGS_EXTRA) -I$(CUDA_INCLUDE) -I$(KREX_HIP_SRC_DIR) -fvisibility=hidden

$(SIMHIP_OBJDIR)/%.o: $(SIMHIP_SRC_DIR)/%.c $(wildcard $(SIMHIP_SRC_DIR)/*.h) $(KREX_HIP_SRC_DIR)/hip_cxx_names.h \
		include/krex_simcuda.h hip.mk | hip-headers
	@mkdir -p $(dir $@)
	$(CC) $(SIMHIP_CFLAGS) -c -o $@ $<

# Soname libamdhip64.so.5: the ROCm release of the headers it is built against.
$(BUILD)/sim/libamdhip64.so.5: $(SIMHIP_OBJS) $(SIMCUDA_LIB)
	$(CC) $(SIMHIP_CFLAGS) -shared -Wl,-soname,libamdhip64.so.5 -Wl,-Bsymbolic-functions -o $@ $(SIMHIP_OBJS) \
		-L$(SIMCUDA_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN' -ldl -pthread

$(BUILD)/sim/libamdhip64.so: $(BUILD)/sim/libamdhip64.so.5
	ln -sf libamdhip64.so.5 $@

# HIP tenants in C: linked against the simulated HIP runtime, the way a
# program built with hipcc links libamdhip64.
HIP_TEST_CFLAGS = $(CFLAGS) $(HIP_CFLAGS_EXTRA) -I$(KREX_HIP_SRC_DIR)
hip-tests: $(KREX_TEST_DIR)/hip_tenant

$(KREX_TEST_DIR)/hip_tenant: tests/hip_tenant.c tests/tenant_check.h include/krex.h $(BUILD)/sim/libamdhip64.so $(BUILD)/libkrex_hip.so
	@mkdir -p $(dir $@)
	$(CC) $(HIP_TEST_CFLAGS) -o $@ $< -L$(BUILD)/sim -l:libamdhip64.so.5 -L$(BUILD) -l:libkrex_hip.so \
		-Wl,-rpath,'$$ORIGIN/../sim' -Wl,-rpath,'$$ORIGIN/..' -pthread
