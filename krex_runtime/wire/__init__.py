"""What a client, the console or a trace reader may import: the control
protocol and its typed bodies, endpoints, the control client, the events (one
dataclass per type), their reducer and the trace. Nothing here imports the
service."""
