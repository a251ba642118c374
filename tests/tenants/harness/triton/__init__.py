"""Stand-in for triton: only triton.testing's timing entry points (tests run without triton)."""
