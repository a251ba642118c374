"""What a node is set up with, from the package alone: `krex config default`
and `krex config unit` print the default config and the systemd unit the
package ships, and `krex-runtime --check-config FILE` says whether a config
would start a runtime, in one line. (tests/packaging proves the same from an
installed wheel, without this checkout.)"""

from __future__ import annotations

import dataclasses
import subprocess
import tomllib
import typing
from pathlib import Path

from runtime_helpers import REPO

from krex_runtime.node.config import Config
from krex_runtime.testing.local_runtime import command


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)


def test_config_default_is_the_shipped_config_and_it_checks_valid(tmp_path: Path) -> None:
    done = run(*command("krex"), "config", "default")
    assert done.returncode == 0 and done.stdout == (REPO / "configs" / "default.toml").read_text()
    assert "runtime" in tomllib.loads(done.stdout)
    config = tmp_path / "krex.toml"
    config.write_text(done.stdout)
    checked = run(*command("krex-runtime"), "--check-config", str(config), cwd=tmp_path)
    assert checked.returncode == 0 and checked.stdout == f"{config}: valid\n" and checked.stderr == ""


def test_check_config_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    cases = {
        "typo.toml": ('[runtime]\npolicyy = "krex"\n', "runtime.policyy: unknown key (did you mean 'policy'?)"),
        "value.toml": ('[runtime]\npolicy = "fast"\n', "runtime.policy: expected one of"),
        "syntax.toml": ("[runtime\n", "not valid TOML"),
    }
    for name, (text, says) in cases.items():
        (tmp_path / name).write_text(text)
        done = run(*command("krex-runtime"), "--check-config", str(tmp_path / name), cwd=tmp_path)
        assert done.returncode == 125 and done.stdout == "", done
        assert len(done.stderr.splitlines()) == 1 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"krex-runtime: {tmp_path / name}: "), done.stderr
        # `krex check-config` says the same, as krex says its failures.
        same = run(*command("krex"), "check-config", str(tmp_path / name), cwd=tmp_path)
        assert (same.returncode, same.stdout) == (125, "") and same.stderr == "krex: " + done.stderr[len("krex-runtime: "):]
    missing = run(*command("krex-runtime"), "--check-config", str(tmp_path / "none.toml"))
    assert missing.returncode == 125 and missing.stderr == f"krex-runtime: {tmp_path / 'none.toml'}: config file not found\n"
    valid = run(*command("krex"), "check-config", "--json", str(REPO / "configs" / "default.toml"))
    assert valid.returncode == 0 and valid.stdout.strip() == (
        f'{{"file": "{REPO / "configs" / "default.toml"}", "valid": true}}'), valid


def test_the_default_config_names_every_key_of_the_schema() -> None:
    """configs/default.toml (`krex config default`) is every section and key
    the runtime reads, each at its built-in default (test_config checks the values)."""
    doc = tomllib.loads((REPO / "configs" / "default.toml").read_text())

    def keys(cls: type, prefix: str = "") -> list[str]:
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):
            if f.name == "source":
                continue
            if dataclasses.is_dataclass(hints[f.name]):
                found += keys(hints[f.name], f"{prefix}{f.name}.")
            else:
                found.append(prefix + f.name)
        return found

    def has(path: str) -> bool:
        table: object = doc
        for part in path.split("."):
            if not isinstance(table, dict) or part not in table:
                return False
            table = table[part]
        return True

    assert [k for k in keys(Config) if not has(k)] == []


def test_config_unit_is_the_shipped_unit_with_this_installs_runtime() -> None:
    done = run(*command("krex"), "config", "unit")
    assert done.returncode == 0 and "[Service]" in done.stdout and "Type=notify" in done.stdout
    runtime = Path(command("krex")[0]).parent / "krex-runtime"
    assert f"ExecStart={runtime}\n" in done.stdout and f"ExecStopPost={runtime} --recover\n" in done.stdout
