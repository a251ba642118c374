"""A tenant that opens connections to its runtime's region channel for a test.

The runtime knows a region channel connection by the process that opened it
(SO_PEERCRED at connect), so a test holding such a connection speaks the
region protocol as this tenant: the region fuzzer does.

    region_donor.py SOCKET

Listens on SOCKET. For each client that sends `connect`: opens a connection to
KREX_REGION_SOCKET and passes it (SCM_RIGHTS) with this tenant's identity as
JSON ({"tenant_id", "pid", "tid", "token"}). A client that sends anything else ends it.
"""

import json
import os
import socket
import sys
import threading

server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen()
identity = json.dumps(
    {
        "tenant_id": os.environ["KREX_TENANT_ID"],
        "pid": os.getpid(),
        "tid": threading.get_native_id(),
        "token": os.environ["KREX_REGION_TOKEN"],
    }
).encode()
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        if conn.recv(16) != b"connect":
            break
        region = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        region.connect(os.environ["KREX_REGION_SOCKET"])
        socket.send_fds(conn, [identity], [region.fileno()])
        region.close()
