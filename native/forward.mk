# Forwarded mode (include/krex_forward.h): the client, a libcuda.so.1 that a
# forwarded command loads instead of the driver, and the context server.
#   $(BUILD)/forward/libcuda.so.1   the client (+ libcuda.so link)
#   $(BUILD)/krex-ctxd              the context server
#   make forward-tests              C test programs under $(BUILD)/tests
#
# Generated at build time under $(BUILD)/forward/gen (the simulator's
# generator, tools/gen_simcuda_entry_points.py, with the client's list):
#   forward_aliases.c            aliases, and a stub for every other entry point
#                                of cuda.h that reports it as not forwarded
#   forward_procaddr_table.inc   the client's cuGetProcAddress table
# The client's error strings are the simulator's generated table.
#
# Generated from the op table tools/forward_ops.py (tools/gen_forward_ops.py)
# and committed, both sides of the one-shape operations:
#   src/forward/client_ops_gen.c     the client's entry points
#   src/forward/server_ops_gen.inc   the server's execution (in server_exec.c)
#   make forward-ops         regenerate them
#   make check-forward-ops   fail if they are out of date with the table
FWD_SRC_DIR := src/forward
FWD_DIR := $(BUILD)/forward
FWD_LIB := $(FWD_DIR)/libcuda.so.1
FWD_SERVER := $(BUILD)/krex-ctxd
FWD_CLIENT_SRCS := $(FWD_SRC_DIR)/client.c $(FWD_SRC_DIR)/client_api.c $(FWD_SRC_DIR)/client_ops_gen.c $(FWD_SRC_DIR)/client_local.c $(FWD_SRC_DIR)/client_pinned.c $(FWD_SRC_DIR)/client_context.c \
	$(FWD_SRC_DIR)/client_procaddr.c
FWD_SERVER_SRCS := $(FWD_SRC_DIR)/server.c $(FWD_SRC_DIR)/server_exec.c
FWD_HDRS := include/krex_forward.h include/krex_simcuda.h $(wildcard $(FWD_SRC_DIR)/*.h) $(FWD_SRC_DIR)/server_ops_gen.inc forward.mk
FWD_ALIASES := $(FWD_DIR)/gen/forward_aliases.c
FWD_TABLE := $(FWD_DIR)/gen/forward_procaddr_table.inc
FWD_LIST := $(FWD_SRC_DIR)/forward_entry_points.txt
FWD_CFLAGS = $(CFLAGS) -I$(CUDA_INCLUDE) -I$(FWD_DIR)/gen -I$(SIMCUDA_DIR)/gen -I$(FWD_SRC_DIR) -fvisibility=hidden
FWD_CLIENT_OBJS := $(patsubst $(FWD_SRC_DIR)/%.c,$(FWD_DIR)/obj/%.o,$(FWD_CLIENT_SRCS) $(FWD_SRC_DIR)/fwd_common.c) \
	$(FWD_DIR)/obj/forward_aliases.o
FWD_SERVER_OBJS := $(patsubst $(FWD_SRC_DIR)/%.c,$(FWD_DIR)/obj/%.o,$(FWD_SERVER_SRCS) $(FWD_SRC_DIR)/fwd_common.c)
FWD_GENERATOR := tools/gen_simcuda_entry_points.py tools/cuda_header.py $(FWD_LIST) $(FWD_CLIENT_SRCS) \
	$(CUDA_INCLUDE)/cuda.h $(CUDA_INCLUDE)/cudaTypedefs.h forward.mk

.PHONY: forward forward-tests forward-ops check-forward-ops
all: forward
forward: $(FWD_LIB) $(FWD_DIR)/libcuda.so $(FWD_SERVER)

forward-ops:
	$(PYTHON) tools/gen_forward_ops.py

check-forward-ops:
	$(PYTHON) tools/gen_forward_ops.py --check

$(FWD_ALIASES): $(FWD_GENERATOR)
	@mkdir -p $(@D)
	$(PYTHON) tools/gen_simcuda_entry_points.py --cuda-include $(CUDA_INCLUDE) --cc $(CC) --list $(FWD_LIST) \
		--header client.h --stub fwd_unknown --stub-rest --aliases $@ $(FWD_CLIENT_SRCS)

$(FWD_TABLE): $(FWD_GENERATOR)
	@mkdir -p $(@D)
	$(PYTHON) tools/gen_simcuda_entry_points.py --cuda-include $(CUDA_INCLUDE) --cc $(CC) --list $(FWD_LIST) \
		--stub-rest --table $@ $(FWD_CLIENT_SRCS)

$(FWD_DIR)/obj/%.o: $(FWD_SRC_DIR)/%.c $(FWD_HDRS) $(SIMCUDA_GEN)
	@mkdir -p $(@D)
	$(CC) $(FWD_CFLAGS) -c $< -o $@

$(FWD_DIR)/obj/client_procaddr.o: $(FWD_TABLE)

$(FWD_DIR)/obj/forward_aliases.o: $(FWD_ALIASES) $(FWD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(FWD_CFLAGS) -Wno-unused-parameter -c $< -o $@

# -Bsymbolic-functions: cuGetProcAddress hands out this library's own entry
# points, even where a preloaded library (libkrex.so) interposes the names.
$(FWD_LIB): $(FWD_CLIENT_OBJS)
	$(CC) $(FWD_CFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic-functions -o $@ $(FWD_CLIENT_OBJS) -pthread

$(FWD_DIR)/libcuda.so: $(FWD_LIB)
	ln -sf libcuda.so.1 $@

$(FWD_SERVER): $(FWD_SERVER_OBJS)
	$(CC) $(FWD_CFLAGS) -o $@ $(FWD_SERVER_OBJS) -ldl -pthread

# The tenant run in process and forwarded mode alike, a hostile client
# that writes malformed and oversized requests into its segment, and hostile
# commands that go for other tenants' memory and the server's own.
forward-tests: $(BUILD)/tests/forward_tenant $(BUILD)/tests/forward_garbage $(BUILD)/tests/forward_hostile \
	$(BUILD)/tests/forward_pinned
$(BUILD)/tests/forward_tenant: tests/forward_tenant.c $(BUILD)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_INCLUDE) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN/../sim'

$(BUILD)/tests/forward_garbage: tests/forward_garbage.c include/krex_forward.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $<

$(BUILD)/tests/forward_hostile: tests/forward_hostile.c include/krex_forward.h $(BUILD)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_INCLUDE) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN/../sim'

# Page-locked memory in both modes: data, costs, a region's staged copies, a
# tenant killed holding pinned memory, raw requests at bad offsets.
$(BUILD)/tests/forward_pinned: tests/forward_pinned.c tests/corpus/corpus_driver.h include/krex_forward.h include/krex.h \
		$(BUILD)/sim/libcuda.so.1 $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_INCLUDE) -Itests -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../sim' -Wl,-rpath,'$$ORIGIN/..'
