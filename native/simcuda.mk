# The simulated CUDA driver: $(BUILD)/sim/libcuda.so.1 (+ libcuda.so link).
# A simulator for machines without a GPU; it never talks to real hardware.
#   make sim        only the simulator
#   make sim-asan   only the simulator, ASan/UBSan build under build/asan/sim
#
# Generated at build time under $(BUILD)/sim/gen, never checked in:
#   simcuda_errors.inc          cuGetErrorName/String table (awk, from cuda.h)
#   simcuda_aliases.c           _v2/_ptsz/_ptds aliases and unsupported stubs,
#   simcuda_procaddr_table.inc  the cuGetProcAddress table: both by
#                               tools/gen_simcuda_entry_points.py from
#                               src/simcuda/simcuda_entry_points.txt, the
#                               hand-written sources, cuda.h, cudaTypedefs.h
CUDA_INCLUDE ?= /usr/local/cuda/include
PYTHON ?= python3

SIMCUDA_DIR := $(BUILD)/sim
SIMCUDA_LIB := $(SIMCUDA_DIR)/libcuda.so.1
SIMCUDA_SRC_DIR := src/simcuda
SIMCUDA_SRCS := $(sort $(wildcard $(SIMCUDA_SRC_DIR)/*.c))
SIMCUDA_ALIASES := $(SIMCUDA_DIR)/gen/simcuda_aliases.c
SIMCUDA_TABLE := $(SIMCUDA_DIR)/gen/simcuda_procaddr_table.inc
SIMCUDA_OBJS := $(patsubst $(SIMCUDA_SRC_DIR)/%.c,$(SIMCUDA_DIR)/obj/%.o,$(SIMCUDA_SRCS)) \
	$(SIMCUDA_DIR)/obj/simcuda_aliases.o
SIMCUDA_GEN := $(SIMCUDA_DIR)/gen/simcuda_errors.inc
SIMCUDA_DEPS := include/krex_simcuda.h $(wildcard $(SIMCUDA_SRC_DIR)/*.h) $(SIMCUDA_GEN) simcuda.mk
SIMCUDA_CFLAGS = $(CFLAGS) -I$(CUDA_INCLUDE) -I$(SIMCUDA_DIR)/gen -fvisibility=hidden

.PHONY: sim sim-asan
all: sim
sim: $(SIMCUDA_LIB) $(SIMCUDA_DIR)/libcuda.so

sim-asan:
	$(MAKE) BUILD=build/asan EXTRA_CFLAGS="$(SAN_FLAGS)" sim

$(CUDA_INCLUDE)/cuda.h:
	@echo "cuda.h not found under CUDA_INCLUDE=$(CUDA_INCLUDE) (set CUDA_INCLUDE)" >&2; exit 1

# cuGetErrorName/cuGetErrorString table, generated from the CUresult enum of
# cuda.h: every enumerant with the first sentence of its comment.
$(SIMCUDA_GEN): $(CUDA_INCLUDE)/cuda.h simcuda.mk
	@mkdir -p $(@D)
	awk '/^typedef enum cudaError_enum/ { inside = 1; next } \
	     inside && /^} CUresult;/ { exit } \
	     inside && /\/\*\*/ { doc = ""; next } \
	     inside && /^ *\*\// { next } \
	     inside && /^ *\* ?/ { line = $$0; sub(/^ *\* ?/, "", line); \
	                           if (line !~ /^\\deprecated/) doc = doc (doc == "" ? "" : " ") line; next } \
	     inside && /^ *CUDA_[A-Z0-9_]+ *= *[0-9]+/ { \
	         text = doc; sub(/\. .*/, ".", text); gsub(/::/, "", text); gsub(/\\/, "", text); \
	         gsub(/"/, "\\\"", text); if (text == "") text = $$1; \
	         printf "    {%s, \"%s\", \"%s\"},\n", $$1, $$1, text; doc = "" }' $< > $@.tmp
	@test -s $@.tmp || { echo "no CUresult enum found in $<" >&2; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

# Both read every hand-written source: an entry point written there is in the
# table, and an alias must call one.
SIMCUDA_GENERATOR := tools/gen_simcuda_entry_points.py tools/cuda_header.py \
	$(SIMCUDA_SRC_DIR)/simcuda_entry_points.txt $(SIMCUDA_SRCS) $(CUDA_INCLUDE)/cuda.h $(CUDA_INCLUDE)/cudaTypedefs.h simcuda.mk
$(SIMCUDA_ALIASES): $(SIMCUDA_GENERATOR)
	@mkdir -p $(@D)
	$(PYTHON) tools/gen_simcuda_entry_points.py --cuda-include $(CUDA_INCLUDE) --cc $(CC) --aliases $@ $(SIMCUDA_SRCS)

$(SIMCUDA_TABLE): $(SIMCUDA_GENERATOR)
	@mkdir -p $(@D)
	$(PYTHON) tools/gen_simcuda_entry_points.py --cuda-include $(CUDA_INCLUDE) --cc $(CC) --table $@ $(SIMCUDA_SRCS)

$(SIMCUDA_DIR)/obj/%.o: $(SIMCUDA_SRC_DIR)/%.c $(SIMCUDA_DEPS)
	@mkdir -p $(@D)
	$(CC) $(SIMCUDA_CFLAGS) -c $< -o $@

$(SIMCUDA_DIR)/obj/simcuda_procaddr.o: $(SIMCUDA_TABLE)

$(SIMCUDA_DIR)/obj/simcuda_aliases.o: $(SIMCUDA_ALIASES) $(SIMCUDA_DEPS)
	@mkdir -p $(@D)
	$(CC) $(SIMCUDA_CFLAGS) -I$(SIMCUDA_SRC_DIR) -c $< -o $@

# -Bsymbolic-functions: the simulator's references to its own entry points
# (the cuGetProcAddress table) bind to itself, never to an interposer.
$(SIMCUDA_LIB): $(SIMCUDA_OBJS)
	$(CC) $(SIMCUDA_CFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic-functions -o $@ $(SIMCUDA_OBJS) -pthread -lm

$(SIMCUDA_DIR)/libcuda.so: $(SIMCUDA_LIB)
	ln -sf libcuda.so.1 $@
