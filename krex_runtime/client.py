"""Critical regions for benchmark code: the public face of the region client.

    from krex_runtime.client import region

    with region():
        times = [timed_run() for _ in range(100)]

The client itself lives in krex_runtime/tenant/region.py (standard library
only: every candidate imports it).
"""

from krex_runtime.region_wire import PROTOCOL
from krex_runtime.tenant.region import RegionError, region, under_runtime

__all__ = ["PROTOCOL", "RegionError", "region", "under_runtime"]
