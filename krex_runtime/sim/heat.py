"""A simulated device's busy time, temperature and SM clock, as its sensors
would tell them now: what the runtime's telemetry reads of a simulated GPU.

The processes running work on the device step its heat model
(native/src/simcuda/simcuda_heat.c) while they run; an idle device takes no
step, so a reader projects the last step to now with the same formula and
constants (krex_simcuda.h, "Heat and the SM clock"):

    u      = busy time / wall time since the step (0..1)
    target = AMBIENT + RISE * u
    temp   = target + (temp at the step - target) * exp(-dt / TAU)

and, with the heat model on, the SM clock is the top clock less a boost bin
for every BOOST_BIN_C above BOOST_KNEE_C, down to the base clock (without it,
the top clock).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from krex_runtime.sim.layout import (
    AMBIENT_C,
    BASE_SM_CLOCK_MHZ,
    BOOST_BIN_C,
    BOOST_BIN_MHZ,
    BOOST_KNEE_C,
    HEAT_TAU_MS,
    LOAD_RISE_C,
    TOP_SM_CLOCK_MHZ,
)


@dataclass(frozen=True)
class DeviceLoad:
    """One device's `struct krex_sim_device_load`: its busy time and the last step of its heat model."""

    busy_ns: int = 0  # wall time during which at least one item executed
    heat_ns: int = 0  # CLOCK_MONOTONIC of the last step; 0: none yet
    heat_busy_ns: int = 0  # busy_ns then
    temp_c: float = AMBIENT_C  # at that step
    sm_clock_mhz: int = TOP_SM_CLOCK_MHZ  # since that step


@dataclass(frozen=True)
class Sensors:
    temp_c: float
    sm_clock_mhz: int


def temperature_after(temp_c: float, dt_ns: int, busy_ns: int) -> float:
    """The temperature `dt_ns` later, the device busy for `busy_ns` of them."""
    if dt_ns <= 0:
        return temp_c
    u = min(1.0, max(0.0, busy_ns / dt_ns))
    target = AMBIENT_C + LOAD_RISE_C * u
    return target + (temp_c - target) * math.exp(-dt_ns / (HEAT_TAU_MS * 1e6))


def clock_at(temp_c: float, heat: bool) -> int:
    """The SM clock at `temp_c`: a boost bin less for every BOOST_BIN_C past the knee, down to the base
    clock, with the model on."""
    if not heat or temp_c <= BOOST_KNEE_C:
        return TOP_SM_CLOCK_MHZ
    bins = min(int((temp_c - BOOST_KNEE_C) / BOOST_BIN_C), (TOP_SM_CLOCK_MHZ - BASE_SM_CLOCK_MHZ) // BOOST_BIN_MHZ)
    return TOP_SM_CLOCK_MHZ - bins * BOOST_BIN_MHZ


def sensors(load: DeviceLoad, heat: bool, now_ns: int | None = None) -> Sensors:
    """The device's temperature and SM clock at `now_ns` (CLOCK_MONOTONIC; None: now)."""
    if not load.heat_ns:
        return Sensors(float(AMBIENT_C), TOP_SM_CLOCK_MHZ)  # it never ran anything
    now = time.monotonic_ns() if now_ns is None else now_ns
    temp = temperature_after(load.temp_c, now - load.heat_ns, load.busy_ns - load.heat_busy_ns)
    return Sensors(temp, clock_at(temp, heat))
