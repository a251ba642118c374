# The interception library (libkrex.so): gate client, drain helper, resolver
# interposition, generated wrappers of the gated driver entry points, and the
# C region API. Included by native/Makefile (CC, CFLAGS, BUILD come from it).
#
#   make -C native                      build/libkrex.so
#   make -C native asan                 build/asan/libkrex.so (ASan + UBSan)
#   make -C native gated-table          regenerate src/intercept/intercept_gated_table.c
#   make -C native check-gated-table    fail if it is out of date with cuda.h
#   make -C native region-protocol      regenerate src/intercept/region_protocol.h
#   make -C native check-region-protocol fail if it differs from krex_runtime/tenant/region_protocol.py
#   make -C native intercept-tests      C test programs under $(BUILD)/tests
#
# The library does not link libcuda: it finds the driver at run time.
CUDA_INCLUDE ?= /usr/local/cuda/include
PYTHON ?= python3

KREX_SRC_DIR := src/intercept
KREX_SRCS := $(sort $(wildcard $(KREX_SRC_DIR)/*.c))
KREX_OBJDIR := $(BUILD)/obj-krex
KREX_OBJS := $(patsubst $(KREX_SRC_DIR)/%.c,$(KREX_OBJDIR)/%.o,$(KREX_SRCS))
KREX_HDRS := include/krex.h include/krex_gate.h $(wildcard $(KREX_SRC_DIR)/*.h)
KREX_CFLAGS = $(CFLAGS) -I$(CUDA_INCLUDE) -fvisibility=hidden

.PHONY: gated-table check-gated-table region-protocol check-region-protocol intercept-tests
all: $(BUILD)/libkrex.so

$(BUILD)/libkrex.so: $(KREX_OBJS)
	$(CC) $(KREX_CFLAGS) -shared -Wl,-soname,libkrex.so -o $@ $(KREX_OBJS) -ldl -pthread

$(KREX_OBJDIR)/%.o: $(KREX_SRC_DIR)/%.c $(KREX_HDRS) intercept.mk
	@mkdir -p $(dir $@)
	$(CC) $(KREX_CFLAGS) -c -o $@ $<

gated-table:
	$(PYTHON) tools/gen_gated_table.py --cuda-include $(CUDA_INCLUDE) --cc $(CC)

check-gated-table:
	$(PYTHON) tools/gen_gated_table.py --cuda-include $(CUDA_INCLUDE) --cc $(CC) --check

# The region protocol version is the Python constant's (tools/gen_region_protocol.py).
region-protocol:
	$(PYTHON) tools/gen_region_protocol.py

check-region-protocol:
	$(PYTHON) tools/gen_region_protocol.py --check

# Test programs: linked against the simulated driver ($(BUILD)/sim) where they
# call the driver directly, the way a program built with -lcuda does.
KREX_TEST_DIR := $(BUILD)/tests
KREX_TEST_CFLAGS = $(CFLAGS) -I$(CUDA_INCLUDE)
intercept-tests: $(KREX_TEST_DIR)/gate_layout $(KREX_TEST_DIR)/linked_tenant $(KREX_TEST_DIR)/resolver_probe $(KREX_TEST_DIR)/region_client \
	$(KREX_TEST_DIR)/event_timing $(KREX_TEST_DIR)/event_table $(KREX_TEST_DIR)/integrity_hacks \
	$(KREX_TEST_DIR)/integrity_timing

$(KREX_TEST_DIR)/gate_layout: tests/gate_layout.c include/krex_gate.h
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $<

$(KREX_TEST_DIR)/linked_tenant: tests/linked_tenant.c $(BUILD)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN/../sim' -pthread

$(KREX_TEST_DIR)/resolver_probe: tests/resolver_probe.c
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -ldl

$(KREX_TEST_DIR)/region_client: tests/region_client.c include/krex.h $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -L$(BUILD) -l:libkrex.so -Wl,-rpath,'$$ORIGIN/..'

# Unprotected-timing detection's tenant: the simulated driver and the region API.
$(KREX_TEST_DIR)/event_timing: tests/event_timing.c tests/tenant_check.h include/krex.h $(BUILD)/sim/libcuda.so.1 $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../sim' -Wl,-rpath,'$$ORIGIN/..'

# Many live events at once (a do_bench-like harness): the event table's capacity.
$(KREX_TEST_DIR)/event_table: tests/event_table.c tests/tenant_check.h include/krex.h $(BUILD)/sim/libcuda.so.1 $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../sim' -Wl,-rpath,'$$ORIGIN/..'

# Times from below: the driver's elapsed times in a region's integrity record.
$(KREX_TEST_DIR)/integrity_timing: tests/integrity_timing.c tests/tenant_check.h include/krex.h $(BUILD)/sim/libcuda.so.1 $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../sim' -Wl,-rpath,'$$ORIGIN/..'

# Measurement integrity's catalogue of timing hacks (and honest timings).
$(KREX_TEST_DIR)/integrity_hacks: tests/integrity_hacks.c tests/tenant_check.h include/krex.h $(BUILD)/sim/libcuda.so.1 $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(KREX_TEST_CFLAGS) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../sim' -Wl,-rpath,'$$ORIGIN/..' -pthread
