"""The client side of a runtime's sockets: the one place that opens a
connection to a runtime (its control DEALER and its telemetry SUB).

connection.py holds the control connection (bounded sends, receives that hear
a refused handshake at once), subscription.py the telemetry subscription,
client_socket.py how both open their socket, keys.py the CURVE keys a tcp
client names, reachable.py the check of an ipc endpoint's permissions,
handshake.py the socket monitor that hears a refused CURVE key, liveness.py
the watch on a runtime that stops answering, and reconnect.py the loop that
opens a session again when one is lost. Every
client (the Python API, the CLI, the console, a cluster agent) is built on
these; the servers' sockets (service/server.py, krex_cluster/sockets.py) are
not clients and stay with them.
"""

from krex_runtime.transport.connection import Connection
from krex_runtime.transport.errors import RuntimeUnavailable
from krex_runtime.transport.keys import CurveKeys
from krex_runtime.transport.subscription import Subscription

__all__ = ["Connection", "CurveKeys", "RuntimeUnavailable", "Subscription"]
