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
