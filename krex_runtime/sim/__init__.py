"""ctypes bindings of the simulated CUDA driver (native/src/simcuda): for
the demo, tests and benchmarks without a GPU. Its figures are simulator
figures, never GPU figures."""
