"""Region tokens: the secret a tenant shows on the region channel.

At start the runtime draws a random key; tenant T's token is
HMAC-SHA256(key, T) in hex, handed to T in its environment (KREX_REGION_TOKEN) and
nowhere else. Tokens are unguessable without the key and differ between
tenants, and deriving them means there is nothing to store or to forget when
a tenant ends: a token of an ended tenant opens nothing, because the channel
also asks that the peer be a process of a running command. A new key at each
start voids every token of the previous run.

A pooled command runs inside its context process under that process's tenant
id (its gate slot was set up under it), so it shows the context process's
token.

Neither the key nor a token is ever logged, traced or published: `repr`
hides the key, and the channel's errors never quote what a peer sent as token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets


class RegionTokens:
    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def __repr__(self) -> str:
        return "RegionTokens(<secret>)"

    def token_for(self, tenant_id: int) -> str:
        return hmac.new(self._key, str(tenant_id).encode(), hashlib.sha256).hexdigest()

    def matches(self, tenant_id: int, presented: str) -> bool:
        """In constant time, so the reply's timing says nothing about how much of it was right."""
        return hmac.compare_digest(self.token_for(tenant_id).encode(), presented.encode("ascii", "replace"))
