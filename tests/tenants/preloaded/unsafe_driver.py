"""A module that initialises the (simulated) CUDA driver when imported: its forks could not use it."""

from krex_runtime.sim.simcuda import SimCuda

CUDA = SimCuda()
