"""The krex-runtime process: builds the node's components, serves the
control and telemetry sockets through the verb handlers, decides who is a
tenant, and shuts down leaving nothing frozen, gated or claimed."""
