# The corpus (tests/corpus/*.c): small native programs of the kinds people
# benchmark with, each checking its results (exit 1 on a mismatch, 2 on a
# failed call), built against the simulated driver (driver API) or forwarded
# mode's CUDA runtime (runtime_*.c); tests/commands/test_forward_corpus.py
# runs each forwarded and asserts its outcome.
CORPUS_SRCS := $(sort $(wildcard tests/corpus/*.c))
CORPUS_BINS := $(patsubst tests/corpus/%.c,$(BUILD)/tests/corpus/%,$(CORPUS_SRCS))
.PHONY: corpus-tests
corpus-tests: $(CORPUS_BINS)
$(BUILD)/tests/corpus/%: tests/corpus/%.c tests/corpus/corpus_driver.h include/krex.h $(BUILD)/sim/libcuda.so.1 \
		$(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_INCLUDE) -o $@ $< -L$(BUILD)/sim -l:libcuda.so.1 -L$(BUILD) -l:libkrex.so \
		-Wl,-rpath,'$$ORIGIN/../../sim' -Wl,-rpath,'$$ORIGIN/../..'
$(BUILD)/tests/corpus/runtime_%: tests/corpus/runtime_%.c tests/nvcc_host_code.h $(CUDART_LIB) $(BUILD)/libkrex.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_INCLUDE) -o $@ $< -L$(FWD_DIR) -l:$(CUDART_SONAME) -Wl,-rpath-link,$(FWD_DIR) \
		-Wl,-rpath,'$$ORIGIN/../../forward'

# The GPU-only entries (tests/corpus/gpu/*.cu): a cuBLAS benchmark and an
# nvbench-style harness, which need nvcc and NVIDIA's libraries, so they are
# in no other target (make corpus-gpu on a machine with the toolkit);
# tests/gpu/test_gpu_forward_corpus.py runs them forwarded on a GPU. Built
# with the shared CUDA runtime, so forwarded mode's libcudart can replace it;
# their run path names the toolkit's for process mode (a DT_RUNPATH, which
# forwarded mode's library path comes before).
NVCC ?= nvcc
# The toolkit: the folder above nvcc's, else /usr/local/cuda (nvcc may be a
# wrapper script elsewhere); the first of them with lib64/libcudart.so.
CORPUS_GPU_CANDIDATES = $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC) 2>/dev/null))) /usr/local/cuda
CORPUS_GPU_CUDA ?= $(patsubst %/lib64/libcudart.so,%,$(firstword $(wildcard $(addsuffix /lib64/libcudart.so,\
	$(CORPUS_GPU_CANDIDATES)))))
CORPUS_GPU_SRCS := $(sort $(wildcard tests/corpus/gpu/*.cu))
CORPUS_GPU_BINS := $(patsubst tests/corpus/gpu/%.cu,$(BUILD)/tests/corpus-gpu/%,$(CORPUS_GPU_SRCS))
.PHONY: corpus-gpu
corpus-gpu: $(CORPUS_GPU_BINS)
$(BUILD)/tests/corpus-gpu/cublas_gemm: CORPUS_GPU_LIBS := -lcublas
$(BUILD)/tests/corpus-gpu/%: tests/corpus/gpu/%.cu
	@test -n "$(CORPUS_GPU_CUDA)" || { echo "the CUDA toolkit (lib64/libcudart.so) was not found: corpus-gpu \
		needs nvcc and cuBLAS (NVCC=..., CORPUS_GPU_CUDA=...)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -cudart shared -o $@ $< $(CORPUS_GPU_LIBS) -Xlinker -rpath,$(CORPUS_GPU_CUDA)/lib64
