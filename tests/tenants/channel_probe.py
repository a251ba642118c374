"""Speaks the region channel by hand, for tests of what the runtime refuses:
run as a tenant (`krex run`), or as a stranger with a forged environment.

argv[1] names a JSON file (so that what it holds stays out of argv and the
trace) with a list of steps:
    [n, text]          send `text` on connection n (opened at its first use),
                       then read one reply line
    [n, text, "all"]   the same, then read every reply until the runtime hangs up
    ["close", n]       close connection n
    ["wait", path]     wait until `path` exists (the test's go-ahead)
`text` may name {hello} (this process's HELLO, from its environment), {tenant},
{token}, {pid} and {tid}; its code points below 256 are sent as those bytes, so "\\u00ff" sends an
invalid UTF-8 byte. Prints the replies as one JSON list, "<closed>" where the
runtime hung up.
"""

import json
import os
import socket
import sys
import threading
import time

TIMEOUT_S = 60


def read_line(f) -> str:
    try:
        line = f.readline()
    except TimeoutError:
        return "<timeout>"
    except OSError:
        return "<closed>"
    return line.decode("ascii", "replace").rstrip("\n") if line else "<closed>"


def main() -> None:
    env = os.environ
    fields = {
        "tenant": env.get("KREX_TENANT_ID", "-1"),
        "token": env.get("KREX_REGION_TOKEN", "-"),
        "pid": os.getpid(),
        "tid": threading.get_native_id(),
    }
    fields["hello"] = "HELLO 2 {tenant} {pid} {token}".format(**fields)
    connections: dict[int, tuple[socket.socket, object]] = {}
    replies: list = []
    with open(sys.argv[1], encoding="utf-8") as f:
        steps = json.load(f)
    for step in steps:
        if step[0] == "close":
            connections.pop(step[1])[0].close()
            continue
        if step[0] == "wait":
            while not os.path.exists(step[1]):
                time.sleep(0.02)
            continue
        n, text = step[0], step[1]
        if n not in connections:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(TIMEOUT_S)
            s.connect(env["KREX_REGION_SOCKET"])
            connections[n] = (s, s.makefile("rb"))
        s, f = connections[n]
        try:
            s.sendall(text.format(**fields).encode("latin-1"))
        except OSError:
            pass  # the runtime may have hung up already; its last word is still there to read
        if len(step) > 2:
            got = []
            while not got or got[-1] not in ("<closed>", "<timeout>"):
                got.append(read_line(f))
            replies.append(got)
        else:
            replies.append(read_line(f))
    print(json.dumps(replies), flush=True)


main()
