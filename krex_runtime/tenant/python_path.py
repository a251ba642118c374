"""The folder every tenant's Python finds KREX's tenant-side code in.

A benchmark command runs whatever Python its author chose (a project venv, a
conda env, the system's), which usually does not have KREX installed; still
`from krex_runtime.client import region` must work there. The runtime writes
this folder into its run dir and commands/environment.py appends it to every
tenant's PYTHONPATH. It holds one file, a shadow `krex_runtime/__init__.py`:

- its `__path__` is extended (pkgutil.extend_path) with every other
  `krex_runtime` on the tenant's sys.path, so a Python that has the project
  installed keeps importing its own copy's modules, then with the runtime's
  own package folder, so one that has none finds the runtime's;
- it runs the first real `krex_runtime/__init__.py` on that path in its own
  namespace, so whatever the package's `__init__` defines (a lazy
  `__getattr__` exporting `Client`, say) is there as if the shadow were not.

Only standard-library modules of the runtime's package import in a Python
without its dependencies: krex_runtime.client and krex_runtime.tenant (a
contract keeps them so).

Its `startup/` folder holds the tenant start-up hook of auto-regions: a
`sitecustomize.py` that is tenant/auto_region.py's source. It is on the
PYTHONPATH of commands with auto-regions only, and first there (a
sitecustomize further on would never run); it runs the user's own
`sitecustomize` from the rest of sys.path.
"""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = "tenant-python"
PACKAGE = "krex_runtime"
STARTUP = "startup"

# The package folder the runtime itself runs from (krex_runtime/).
RUNTIME_PACKAGE = Path(__file__).resolve().parent.parent

SHADOW_INIT = '''\
# Written by krex-runtime (krex_runtime/tenant/python_path.py): makes KREX's
# tenant-side code importable by any Python a command runs. Do not edit.
import os as _os
import pkgutil as _pkgutil

__path__ = _pkgutil.extend_path(__path__, __name__)
_RUNTIME_PACKAGE = {runtime!r}


def _same(a, b):
    try:
        return _os.path.samefile(a, b)
    except OSError:
        return False


if not any(_same(_p, _RUNTIME_PACKAGE) for _p in __path__):
    __path__.append(_RUNTIME_PACKAGE)
for _p in __path__[1:]:
    _init = _os.path.join(_p, "__init__.py")
    if _os.path.isfile(_init):
        with open(_init, "rb") as _f:
            _code = compile(_f.read(), _init, "exec")
        __file__ = _init
        del _p, _f
        exec(_code, globals())
        break
'''


def prepare(run_dir: Path) -> Path:
    """Write the folder under `run_dir` (again on every start: the runtime's
    package may have moved) and return it. Readable by every user: tenants
    may run as another one."""
    folder = run_dir / FOLDER
    package = folder / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    init = package / "__init__.py"
    tmp = package / "__init__.py.tmp"
    tmp.write_text(SHADOW_INIT.format(runtime=str(RUNTIME_PACKAGE)))
    os.chmod(tmp, 0o644)
    os.replace(tmp, init)
    startup = folder / STARTUP
    startup.mkdir(exist_ok=True)
    hook = startup / "sitecustomize.py.tmp"
    hook.write_bytes((Path(__file__).parent / "auto_region.py").read_bytes())
    os.chmod(hook, 0o644)
    os.replace(hook, startup / "sitecustomize.py")
    for path in (folder, package, startup):
        os.chmod(path, 0o755)
    return folder


def startup_folder(folder: Path) -> Path:
    """The folder of the auto-region start-up hook inside `folder` (prepare's)."""
    return folder / STARTUP
