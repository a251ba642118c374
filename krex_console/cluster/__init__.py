"""The cluster console: a gateway's nodes in one view, and drilling into one.

console.py is the cluster's app (the Nodes view, drill-in, actions that name
the node); nodes_feed.py feeds it, live from a gateway or replayed from a
cluster trace; node_summary.py is a node as the Nodes view shows it; nodes.py
is that view.
A drilled-in node's own views are the single-node console's, fed by its
LiveFeed (krex_console/feed.py) through the gateway.
"""
