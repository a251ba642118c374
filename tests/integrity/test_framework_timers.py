"""Framework timers replaced in Python (krex_runtime/tenant/framework_timers.py,
docs/integrity.md): a process's torch/Triton timers are looked at where the
modules are already imported, never imported; the framework's own functions
(and auto-regions' wrappers of them) are not flagged, a replacement is, from
the first look on, and every release after it carries it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from krex_runtime.tenant import framework_timers, integrity


def fake_torch(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A `torch.cuda` whose functions say they are torch's, as torch's do."""
    source = textwrap.dedent('''
        class Event:
            def elapsed_time(self, end): return 1.0
            def record(self, stream=None): pass
        class Stream:
            def wait_stream(self, other): pass
        def synchronize(): pass
    ''')
    cuda = types.ModuleType("torch.cuda")
    exec(compile(source, "torch/cuda/streams.py", "exec"), cuda.__dict__)
    for obj in (cuda.Event, cuda.Event.elapsed_time, cuda.Event.record, cuda.Stream, cuda.Stream.wait_stream,
                cuda.synchronize):
        obj.__module__ = "torch.cuda.streams"
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch.cuda", cuda)
    monkeypatch.setattr(framework_timers, "_originals", {})
    return cuda


def test_the_frameworks_own_timers_are_not_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = fake_torch(monkeypatch)
    assert framework_timers.replaced() == []
    assert framework_timers.replaced() == []  # looked at again: the same objects
    # auto-regions' wrapper stands for the function it wraps
    original = cuda.synchronize

    def wrapper() -> None:
        original()

    wrapper.__krex_auto_region__ = "torch.cuda:synchronize"  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    cuda.synchronize = wrapper
    assert framework_timers.replaced() == []


def test_a_replacement_is_flagged_before_or_after_the_first_look(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = fake_torch(monkeypatch)
    cuda.Event.elapsed_time = lambda self, end: 0.01  # before any look: not torch's own
    assert framework_timers.replaced() == ["torch.cuda:Event.elapsed_time"]
    cuda = fake_torch(monkeypatch)
    assert framework_timers.replaced() == []
    cuda.Stream.wait_stream = cuda.Event.record  # torch's own function, in another's place
    cuda.synchronize = lambda: None
    assert framework_timers.replaced() == ["torch.cuda:synchronize", "torch.cuda:Stream.wait_stream"]


def test_a_module_imported_anew_is_looked_at_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pooled context process forgets the modules a command imported: the
    # next command's torch has new function objects, torch's own all the same.
    fake_torch(monkeypatch)
    assert framework_timers.replaced() == []
    first_looks = dict(framework_timers._originals)
    again = fake_torch(monkeypatch)
    monkeypatch.setattr(framework_timers, "_originals", first_looks)  # the first looks kept, of the old module
    assert framework_timers.replaced() == []
    again.synchronize = lambda: None
    assert framework_timers.replaced() == ["torch.cuda:synchronize"]


def test_every_release_after_a_replacement_carries_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = fake_torch(monkeypatch)
    monkeypatch.setattr(integrity, "patched_harnesses", [])
    integrity.look_at_timers()  # as a region's entry does
    assert integrity.patched_now() == []
    cuda.Event.elapsed_time = lambda self, end: 0.01
    assert integrity.patched_now() == ["torch.cuda:Event.elapsed_time"]
    cuda.Event.elapsed_time = lambda self, end: 1.0  # put back by another replacement: still not torch's
    assert integrity.patched_now() == ["torch.cuda:Event.elapsed_time"]


def test_nothing_is_imported(tmp_path: Path) -> None:
    # A process that never imported torch: the check looks at nothing, imports nothing.
    code = ("import sys; from krex_runtime.tenant import integrity; integrity.look_at_timers(); "
            "print(integrity.patched_now(), [m for m in ('torch', 'triton') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]"]
