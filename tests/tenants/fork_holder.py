"""A tenant that enters a region, forks a child that keeps the region
channel's socket open, and exits at once: the region is its requester's, so
it must be released the moment the requester dies, not held by the child.
Prints "entered <pid>" and "child <pid>" on the way; with an argument, the
requester exits only once that file exists."""

import os
import sys
import time

from krex_runtime.client import region

held = region()
held.__enter__()
print(f"entered {os.getpid()}", flush=True)
child = os.fork()
if child == 0:
    time.sleep(1000)  # holds the inherited socket and nothing else
    os._exit(0)
print(f"child {child}", flush=True)
while len(sys.argv) > 1 and not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
os._exit(0)  # no __exit__: the region is never released by its owner
