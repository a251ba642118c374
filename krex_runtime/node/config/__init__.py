"""The runtime's configuration: TOML files loaded into frozen dataclasses and
checked against the rules a type cannot express.

sections.py holds the typed tables, bounds.py every setting's range,
problems.py the checks against the machine, rules.py `validate`, loading.py
reading a file, places.py the folders a config leaves to the defaults. This
package's names are the ones the rest of the runtime uses.
"""

from krex_runtime.node.config.bounds import BOUNDS, MAX_DURATION_S
from krex_runtime.node.config.loading import load_config, problem_of_file
from krex_runtime.node.config.places import resolve_lock_dir, resolve_run_dir, resolve_simulated_device
from krex_runtime.node.config.problems import (
    auto_region_entry_problem,
    cpu_slices_problem,
    environment_problem,
    listen_address,
)
from krex_runtime.node.config.rules import validate
from krex_runtime.node.config.sections import (
    POLICIES,
    Config,
    ConfigError,
    DispatcherSection,
    EvalSection,
    ForwardSection,
    GpuSection,
    Policy,
    PoolSection,
    RegionSection,
    RuntimeSection,
    TelemetrySection,
    TenantSection,
)

__all__ = [
    "BOUNDS",
    "MAX_DURATION_S",
    "POLICIES",
    "Config",
    "ConfigError",
    "DispatcherSection",
    "EvalSection",
    "ForwardSection",
    "GpuSection",
    "Policy",
    "PoolSection",
    "RegionSection",
    "RuntimeSection",
    "TelemetrySection",
    "TenantSection",
    "auto_region_entry_problem",
    "cpu_slices_problem",
    "environment_problem",
    "listen_address",
    "load_config",
    "problem_of_file",
    "resolve_lock_dir",
    "resolve_run_dir",
    "resolve_simulated_device",
    "validate",
]
