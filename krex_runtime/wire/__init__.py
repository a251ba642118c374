"""What a client, the console or a trace reader may import, in three parts:
protocol/ (the control protocol: envelope, verbs, request and reply bodies,
endpoints, serving), state/ (the events, one dataclass per type, the one
reducer that folds them into a node's state, snapshots) and trace/ (the JSONL
history, its segments, its summary, a cluster's traces merged). Beside them,
the strict converter every config file and message goes through (typed.py,
toml_file.py), text made safe for a terminal (printable.py) and the version.
Nothing here imports the service."""
