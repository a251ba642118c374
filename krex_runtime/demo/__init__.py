"""The demo's synthetic kernel-agent workload and its candidate program
(on the simulated driver)."""
