"""The GPU view's line on forked mode's zygote and the pool's replacements."""

from krex_console.views.gpu_detail import isolation_text
from krex_runtime.wire.state.apply import GpuState


def gpu(**fields: object) -> GpuState:
    return GpuState(index=0, uuid="GPU-0", name="sim", memory_total=0, simulated=True, slots=4, **fields)  # type: ignore[arg-type]


def test_the_zygote_and_the_replacements_by_cause_are_shown() -> None:
    state = gpu(
        zygote={"id": "z", "state": "ready", "forks": 12, "restarts": 1},
        pool={"size": 2, "reasons": {"state-changed": 3, "exited": 1},
              "last_replaced": {"cause": "state-changed", "reason": "state-changed: torch.backends.cudnn.benchmark"}},
    )
    assert isolation_text(state) == (
        "zygote ready  forks 12  restarts 1  replaced exited 1, state-changed 3"
        "  last: state-changed: torch.backends.cudnn.benchmark"
    )


def test_a_refusing_zygote_says_why_and_a_gpu_without_either_shows_nothing() -> None:
    refused = gpu(zygote={"id": "z", "state": "failed", "reason": "unsafe preload: x", "forks": 0, "restarts": 0})
    assert isolation_text(refused) == "zygote failed (unsafe preload: x)  forks 0  restarts 0"
    assert isolation_text(gpu()) == ""
