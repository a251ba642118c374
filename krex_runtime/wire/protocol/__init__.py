"""The control protocol: the message envelope, each verb's request and reply bodies, where a runtime listens, and serving it (docs/protocol.md)."""
