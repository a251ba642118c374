"""The trace: the append-only JSONL history of a node (docs/trace-format.md), its segment files, its summary, and a cluster's traces merged."""
