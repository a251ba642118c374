"""The calls the gated tables of both interception libraries (CUDA's,
gen_gated_table.py, and HIP's, gen_hip_gated_table.py) make around some
real calls: the event tracker (intercept_events.c: unprotected timings) and
measurement integrity (intercept_integrity.c: what joins streams). One list,
so the two APIs are watched alike.

Each hook is (C before the real call, C after it), formatted with the
variant's argument names a[0], a[1]...; `r` is the real call's result,
`outer` says the call came from the program (not from the driver itself),
and `{pt}` is 1 in a per-thread-stream variant (_ptsz/_ptds), where a NULL
stream is the calling thread's own, else 0.
"""

from __future__ import annotations

# API-neutral name (after the cu/hip prefix) -> (before, after); `{ok}` is the API's success value.
_HOOKS: dict[str, tuple[str, str]] = {
    "EventRecord": ("", "if (r == {ok} && outer) krex_event_recorded({{a[0]}}, {{a[1]}}, {{pt}});"),
    "EventRecordWithFlags": ("", "if (r == {ok} && outer) krex_event_recorded({{a[0]}}, {{a[1]}}, {{pt}});"),
    "EventElapsedTime": ("", "if (r == {ok} && outer) krex_event_elapsed({{a[0]}}, {{a[1]}}, {{a[2]}});"),
    # Before: once destroyed, the driver may hand the same handle out again.
    "EventDestroy": ("if (outer) krex_event_destroyed({{a[0]}});", ""),
    "StreamWaitEvent": ("", "if (r == {ok} && outer) krex_integrity_wait({{a[0]}}, {{a[1]}}, {{pt}});"),
    "StreamSynchronize": ("", "if (r == {ok} && outer) krex_integrity_sync_stream({{a[0]}}, {{pt}});"),
    "StreamQuery": ("", "if (r == {ok} && outer) krex_integrity_sync_stream({{a[0]}}, {{pt}});"),
    "EventSynchronize": ("", "if (r == {ok} && outer) krex_integrity_sync_event({{a[0]}});"),
    "EventQuery": ("", "if (r == {ok} && outer) krex_integrity_sync_event({{a[0]}});"),
}
_SYNC_ALL = ("", "if (r == {ok} && outer) krex_integrity_sync_all();")


def hooks(prefix: str, ok: str, sync_all: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """The hooks by base name for the API whose entry points start with
    `prefix` and succeed with `ok`; `sync_all` names its waits for the whole
    device (API-neutral, as the keys above)."""
    named = dict(_HOOKS) | {name: _SYNC_ALL for name in sync_all}
    return {prefix + name: (before.format(ok=ok), after.format(ok=ok)) for name, (before, after) in named.items()}


def gated_call(i: int, tracked: bool, before: str, after: str, result: str, call: str) -> list[str]:
    """The body of a gated entry point from the gate onwards, for either
    vendor: enter the gate (or the tracker), the hooks around the real call
    (`outer` tells them the call is not nested in another gated one), leave,
    return. `result`: the vendor's result type; `call`: the real call."""
    out = [f"    int token = krex_track_enter({i});" if tracked else f"    int token = krex_gate_enter({i});"]
    if before or after:
        out.append("    int outer = token != KREX_TOKEN_NESTED;")
    if before:
        out.append(f"    {before}")
    out.append(f"    {result} r = {call};")
    if after:
        out.append(f"    {after}")
    out += ["    krex_track_leave(token);" if tracked else f"    krex_gate_leave({i}, token);", "    return r;", "}", ""]
    return out
