"""What the console sees of each GPU besides regions: NVML metrics
(or the simulator's), and the canary's inflation estimate."""
