"""The one failure of the transport: no runtime answers at an endpoint (or
it refused this client), said in a sentence for the person who asked."""


class RuntimeUnavailable(Exception):
    """No runtime answers at the endpoint."""
