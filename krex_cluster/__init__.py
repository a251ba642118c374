"""KREX beyond one node: a cluster of krex-runtime nodes on Ray.

agent.py the node agent (one Ray actor per node, fronting its runtime:
supervisor.py starts it, link.py talks to it); router.py where a command
goes (pure); command_table.py the cluster's commands, each result taken once;
nodes.py the nodes and their agents on Ray; gateway.py the Ray driver that
speaks the control protocol, handlers.py its verbs, sockets.py its
endpoints, access.py who may change things; config.py its TOML; main.py `krex-cluster head`; testing.py a
cluster on this machine (ray.cluster_utils) for tests and benchmarks.

The runtime never imports this package; this package uses only the runtime's
public surface (the wire protocol and its typed decoding); testing.py writes
its nodes' configs as krex_runtime.testing writes a test runtime's.
"""
