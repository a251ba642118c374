"""A tenant that keeps a real GPU busy: queues bf16 matmuls, synchronises, repeats.

argv: [n] [depth]. Runs until killed. Prints "ready" once its first batch completed.
"""

import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 4
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
first = True
while True:
    for _ in range(depth):
        c = a @ b
    torch.cuda.synchronize()
    if first:
        print("ready", flush=True)
        first = False
