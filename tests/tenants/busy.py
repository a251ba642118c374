"""A tenant that keeps its simulated GPU busy: queues kernels, synchronises, repeats.

argv: kernel_us [queue_depth] [threads]. Runs until killed. Writes "ready" to
stdout once its first batch completed.
"""

import sys
import threading

from krex_runtime.sim.simhip import sim_gpu

kernel_ns = int(float(sys.argv[1]) * 1000)
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 4
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
cuda = sim_gpu()
ready = threading.Event()


def loop() -> None:
    cuda.make_current()
    stream = cuda.stream()
    while True:
        for _ in range(depth):
            cuda.launch(kernel_ns, stream=stream)
        cuda.stream_synchronize(stream)
        if not ready.is_set():
            ready.set()
            print("ready", flush=True)


workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
