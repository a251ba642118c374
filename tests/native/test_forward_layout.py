"""krex_runtime/commands/forwarded/forward_ring.py mirrors native/include/krex_forward.h."""

from __future__ import annotations

import subprocess
from pathlib import Path

from krex_runtime.commands.forwarded import forward_ring
from krex_runtime.node import native_build

PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include "krex_forward.h"
#define F(f) printf(#f " %zu\n", offsetof(struct krex_fwd_header, f));
int main(void)
{
    FIELDS
    printf("magic %llu\nversion %u\nheader_size %u\nexit_unknown %d\n", (unsigned long long)KREX_FWD_MAGIC,
           KREX_FWD_VERSION, KREX_FWD_HEADER_SIZE, KREX_FWD_EXIT_UNKNOWN_CALL);
    printf("states %d %d %d %d\n", KREX_FWD_STATE_NEW, KREX_FWD_STATE_SERVING, KREX_FWD_STATE_ENDED,
           KREX_FWD_STATE_FAILED);
    printf("env %s %s\n", KREX_FWD_ENV_RING, KREX_FWD_ENV_FALLBACK);
    printf("lengths %zu %zu\n", sizeof(((struct krex_fwd_header *)0)->reason),
           sizeof(((struct krex_fwd_header *)0)->unknown_call));
    return 0;
}
"""


def test_the_segment_layout_matches_the_header(tmp_path: Path) -> None:
    source = tmp_path / "layout.c"
    fields = " ".join(f"F({name})" for name in forward_ring.OFFSETS)
    source.write_text(PROGRAM.replace("FIELDS", fields))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", f"-I{native_build.REPO_ROOT / 'native' / 'include'}", "-o", str(exe), str(source)],
                   check=True)
    lines = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                              text=True).stdout.splitlines())
    for name, offset in forward_ring.OFFSETS.items():
        assert int(lines[name]) == offset, name
    assert int(lines["magic"]) == forward_ring.MAGIC
    assert int(lines["version"]) == forward_ring.VERSION
    assert int(lines["header_size"]) == forward_ring.HEADER_SIZE
    assert int(lines["exit_unknown"]) == forward_ring.EXIT_UNKNOWN_CALL
    assert lines["states"].split() == [str(s) for s in (forward_ring.STATE_NEW, forward_ring.STATE_SERVING,
                                                         forward_ring.STATE_ENDED, forward_ring.STATE_FAILED)]
    assert lines["env"].split() == [forward_ring.ENV_RING, forward_ring.ENV_FALLBACK]
    assert lines["lengths"].split() == [str(forward_ring.REASON_LEN), str(forward_ring.CALL_LEN)]
