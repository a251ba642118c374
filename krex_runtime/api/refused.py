"""What a request can end in besides its reply: the runtime refused it
(`RequestFailed`, with the protocol's error code and reason). A runtime that
does not answer at all is the transport's `RuntimeUnavailable`."""


class RequestFailed(Exception):
    """An error reply: `code` is one of the protocol's error codes (docs/protocol.md)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
