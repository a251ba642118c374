"""The Python API of a KREX runtime: submit benchmark commands and read
their results, from a script or an agent loop (docs/api.md).

    from krex_runtime import Client

    with Client() as krex:
        result = krex.run(["python3", "bench.py"], label="candidate-7")
        print(result.exit_code, result.stdout, [r.hold_s for r in result.regions])

`AsyncClient` (aio.py) is the one implementation; `Client` (sync.py) is the
same calls, blocking. Both speak only the control protocol
(krex_runtime/wire) over the one transport (krex_runtime/transport), so they
work against a runtime on this node (ipc) or another one (tcp + CURVE) alike;
`krex`, the console and the cluster's agents are built on them.
"""

from krex_runtime.api.aio import AsyncClient, AsyncHandle
from krex_runtime.api.options import Command, SubmitOptions
from krex_runtime.api.refused import RequestFailed
from krex_runtime.api.results import CommandStatus, Event, GpuStatus, NodeStatus, Region, Result
from krex_runtime.api.sync import Client, Handle
from krex_runtime.transport import RuntimeUnavailable
from krex_runtime.wire.evaluation import Evaluation, EvaluationError
from krex_runtime.wire.protocol.envelope import ProtocolError

__all__ = [
    "AsyncClient", "AsyncHandle", "Client", "Command", "CommandStatus", "Evaluation", "EvaluationError", "Event",
    "GpuStatus", "Handle",
    "NodeStatus", "ProtocolError", "Region", "RequestFailed", "Result", "RuntimeUnavailable", "SubmitOptions",
]
