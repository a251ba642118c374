"""The `staged_copy` flag of a region's integrity record (docs/integrity.md):
the words of an EXIT line that carry it, and the record made of them. End to
end (a forwarded command's staged copies inside a region):
tests/commands/test_forward_pinned.py."""

from __future__ import annotations

from krex_runtime import region_wire


def test_staged_copies_make_a_flag_of_their_own_beside_the_windows() -> None:
    arg = "integrity=5,0,0,0,0 staged=3"
    counts, patched, timing = region_wire.parse_exit(arg)
    rec = region_wire.record(counts, patched, timing, staged=region_wire.parse_staged(arg))
    assert rec is not None and not rec["clean"]
    assert rec["flags"]["staged_copy"]["count"] == 3
    assert rec["flags"]["staged_copy"]["reason"].startswith("3 copies: copies from or to page-locked host memory")
    assert rec["summary"] == "integrity: flagged (staged_copy 3; 5 timed windows)"
    # The words the runtime echoes carry it again, and read back the same.
    said = region_wire.words("5,0,0,0,0", [], staged=3)
    assert said == "integrity=5,0,0,0,0 staged=3"
    assert region_wire.record(*region_wire.parse_exit(said), staged=region_wire.parse_staged(said)) == rec


def test_staged_copies_alone_still_make_a_record() -> None:
    # No gate judged any window (no integrity words), but the copies were staged.
    rec = region_wire.record(None, [], staged=region_wire.parse_staged("staged=1"))
    assert rec is not None and rec["windows"] == 0
    assert list(rec["flags"]) == ["staged_copy"] and rec["flags"]["staged_copy"]["reason"].startswith("1 copy: ")


def test_no_staged_copy_is_no_flag_and_garbage_is_none() -> None:
    assert region_wire.record(*region_wire.parse_exit("integrity=2,0,0,0,0")) == {
        "windows": 2, "clean": True, "summary": "integrity: clean (2 timed windows)", "flags": {}, "timing": None}
    assert region_wire.record(None, [], staged=0) is None
    for bad in ("staged=", "staged=-1", "staged=1e3", "staged=١٢", "staged=" + "9" * 20, "staged"):
        assert region_wire.parse_staged(bad) == 0, bad
    assert region_wire.parse_staged("staged=" + "9" * 19) == region_wire.MAX_COUNT
