"""Is the runtime still there? The watch a client keeps while it waits for
something: ping with `hello` when the connection has been quiet for
PING_AFTER_S, give the runtime up when the ping goes unanswered for
DEAD_AFTER_S, or at once when another runtime answers in its place. It keeps
no socket: the client's reader feeds it what it hears and sends its pings.
"""

from __future__ import annotations

from typing import Any

PING_AFTER_S = 1.0
DEAD_AFTER_S = 5.0


class Liveness:
    """Notices a runtime that stopped answering while a client waits."""

    def __init__(self, now: float) -> None:
        self.last_heard = now
        self.ping_id: str | None = None
        self.ping_sent = 0.0
        # A cluster gateway names its instance in hello: another one answering
        # at the same endpoint (it restarted) has none of this client's
        # attachments, so waiting on would be waiting forever.
        self.instance: str | None = None
        self.replaced = False

    def heard(self, msg: dict[str, Any], now: float) -> bool:
        """Note a message; True when it was our ping's answer (nothing else to do with it)."""
        self.last_heard = now
        if self.ping_id is not None and msg.get("re") == self.ping_id:
            self.ping_id = None
            body = msg.get("body")
            instance = body.get("instance") if isinstance(body, dict) else None
            instance = instance if isinstance(instance, str) else None
            if instance and self.instance is None:
                self.instance = instance
            self.replaced = self.replaced or bool(instance and instance != self.instance)
            return True
        return False

    def quiet(self, now: float) -> bool:
        """Nothing came: True when a ping should go out now (set ping_id after sending).
        A ping with something heard since is taken as answered: the runtime is
        there, and a runtime drops what it sends a client that fell behind
        (the answer may be among it), so waiting for that answer would be
        waiting forever."""
        if self.ping_id is None or self.last_heard > self.ping_sent:
            return now - self.last_heard >= PING_AFTER_S
        return False

    def dead(self, now: float) -> bool:
        if self.replaced:
            return True
        return self.ping_id is not None and now - self.ping_sent > DEAD_AFTER_S and now - self.last_heard > DEAD_AFTER_S
