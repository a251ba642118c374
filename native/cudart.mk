# Forwarded mode's CUDA runtime (src/cudart/cudart.h): a libcudart.so.N, put
# next to the forwarding client so that a program linked with the shared CUDA
# runtime (nvcc -cudart shared) loads it in forwarded mode.
#   $(BUILD)/forward/libcudart.so.N   N: the major version of CUDART_VERSION in
#                                     the cuda_runtime_api.h it is built from
#   make cudart-tests                 its C test program under $(BUILD)/tests
#
# Generated at build time under $(BUILD)/cudart/gen:
#   cudart_errors.inc   cudaGetErrorName/String table (awk, from driver_types.h)
#   cudart_stubs.c      a stub for every entry point of cuda_runtime_api.h that
#                       the sources do not write (tools/gen_cudart_stubs.py)
#   libcudart.map       the version script: the toolkit libcudart's version node
CUDART_SRC_DIR := src/cudart
CUDART_DIR := $(BUILD)/cudart
CUDART_MAJOR := $(shell sed -n 's/^\#define CUDART_VERSION *\([0-9]*\)[0-9][0-9][0-9] *$$/\1/p' \
	$(CUDA_INCLUDE)/cuda_runtime_api.h 2>/dev/null)
CUDART_SONAME := libcudart.so.$(CUDART_MAJOR)
CUDART_LIB := $(FWD_DIR)/$(CUDART_SONAME)
CUDART_SRCS := $(sort $(wildcard $(CUDART_SRC_DIR)/*.c))
CUDART_ERRORS := $(CUDART_DIR)/gen/cudart_errors.inc
CUDART_STUBS := $(CUDART_DIR)/gen/cudart_stubs.c
CUDART_MAP := $(CUDART_DIR)/gen/libcudart.map
CUDART_OBJS := $(patsubst $(CUDART_SRC_DIR)/%.c,$(CUDART_DIR)/obj/%.o,$(CUDART_SRCS)) $(CUDART_DIR)/obj/cudart_stubs.o
CUDART_CFLAGS = $(CFLAGS) -I$(CUDA_INCLUDE) -I$(CUDART_DIR)/gen -I$(CUDART_SRC_DIR) -fvisibility=hidden

.PHONY: cudart cudart-tests
all: cudart
cudart: $(CUDART_LIB)

# cudaGetErrorName/String table from the cudaError enum of driver_types.h:
# every enumerant with the first sentence of its comment.
$(CUDART_ERRORS): $(CUDA_INCLUDE)/driver_types.h cudart.mk
	@mkdir -p $(@D)
	awk '/^enum __device_builtin__ cudaError$$/ { inside = 1; next } \
	     inside && /^};/ { exit } \
	     inside && /\/\*\*/ { doc = ""; next } \
	     inside && /^ *\*\// { next } \
	     inside && /^ *\* ?/ { line = $$0; sub(/^ *\* ?/, "", line); \
	                           if (line !~ /^\\deprecated/) doc = doc (doc == "" ? "" : " ") line; next } \
	     inside && /^ *cuda[A-Za-z0-9]+ *= *[0-9]+/ { \
	         text = doc; sub(/\. .*/, ".", text); gsub(/::/, "", text); gsub(/\\/, "", text); \
	         gsub(/"/, "\\\"", text); if (text == "") text = $$1; \
	         printf "    {%s, \"%s\", \"%s\"},\n", $$1, $$1, text; doc = "" }' $< > $@.tmp
	@test -s $@.tmp || { echo "no cudaError enum found in $<" >&2; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

$(CUDART_STUBS) $(CUDART_MAP) &: tools/gen_cudart_stubs.py tools/cuda_header.py $(CUDART_SRCS) \
		$(CUDA_INCLUDE)/cuda_runtime_api.h cudart.mk
	@mkdir -p $(@D)
	$(PYTHON) tools/gen_cudart_stubs.py --cuda-include $(CUDA_INCLUDE) --cc $(CC) --soname $(CUDART_SONAME) \
		--stubs $(CUDART_STUBS) --map $(CUDART_MAP) $(CUDART_SRCS)

$(CUDART_DIR)/obj/%.o: $(CUDART_SRC_DIR)/%.c $(CUDART_SRC_DIR)/cudart.h $(CUDART_ERRORS) cudart.mk
	@mkdir -p $(@D)
	$(CC) $(CUDART_CFLAGS) -c $< -o $@

$(CUDART_DIR)/obj/cudart_stubs.o: $(CUDART_STUBS)
	@mkdir -p $(@D)
	$(CC) $(CUDART_CFLAGS) -Wno-strict-prototypes -c $< -o $@

# Linked against the forwarding client, whose soname is the driver's: at run
# time libcuda.so.1 is whichever driver the command's library path gives
# (the client in forwarded mode). -Bsymbolic-functions: its own calls between
# runtime entry points stay inside it.
$(CUDART_LIB): $(CUDART_OBJS) $(CUDART_MAP) $(FWD_LIB)
	$(CC) $(CUDART_CFLAGS) -shared -Wl,-soname,$(CUDART_SONAME) -Wl,--version-script=$(CUDART_MAP) \
		-Wl,-Bsymbolic-functions -o $@ $(CUDART_OBJS) -L$(FWD_DIR) -l:libcuda.so.1 -pthread

# A C program written against cuda_runtime_api.h that registers a fatbinary
# and its kernels as nvcc's host code does, run in process mode (this library
# over the simulated driver) and forwarded.
cudart-tests: $(BUILD)/tests/cudart_tenant
$(BUILD)/tests/cudart_tenant: tests/cudart_tenant.c tests/nvcc_host_code.h include/krex.h $(CUDART_LIB) $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_INCLUDE) -o $@ $< -L$(FWD_DIR) -l:$(CUDART_SONAME) -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../forward' -Wl,-rpath,'$$ORIGIN/..'
