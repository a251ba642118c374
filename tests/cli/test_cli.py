"""`krex`'s conventions: --version, one JSON document per --json, the exit
status table, quiet on a closed pipe, status/cancel/trace wording, help on
every positional argument, a no-runtime hint that works as written. One
runtime (policy krex, simulated GPU) serves the module."""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import pty
import re
import shlex
import signal
import struct
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from runtime_helpers import PY, REPO, TENANTS, module_runtime, regions_config

from krex_runtime.api import NodeStatus
from krex_runtime.cli.parser import EXIT_STATUS_TABLE, build_parser
from krex_runtime.cli.views import status_view
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime, command, wait_until

SLEEP = [PY, "-c", "import time; time.sleep(60)"]


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("cli") / "rt", policy="krex", sim=1, slots=8, extra_config=regions_config())


def one_document(done: subprocess.CompletedProcess[str]) -> dict:
    """stdout holds exactly one JSON document."""
    return json.loads(done.stdout)


def test_version() -> None:
    done = subprocess.run([*command("krex"), "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert re.fullmatch(r"krex \S+ \(protocol 1\)\n", done.stdout), done.stdout


def test_every_subcommand_gives_one_json_document(rt: Runtime, tmp_path: Path) -> None:
    run = one_document(rt.krex("run", "--json", "--", "sh", "-c", "echo out; echo err >&2"))
    assert run["stdout"] == "out\n" and run["stderr"] == "err\n" and run["exit_status"] == 0
    submitted = one_document(rt.krex("submit", "--json", "--", "echo", "later"))
    waited = one_document(rt.krex("wait", "--json", submitted["id"]))
    assert waited["id"] == submitted["id"] and waited["stdout"] == "later\n"
    assert one_document(rt.krex("status", "--json"))["policy"] == "krex"
    victim = rt.krex("submit", "--", *SLEEP).stdout.strip()
    assert one_document(rt.krex("cancel", "--json", victim)) == {"id": victim, "state": "cancelled"}
    assert one_document(rt.krex("pause", "--json", "--gpu", "0")) == {"paused": 0}
    assert one_document(rt.krex("resume", "--json", "--gpu", "0")) == {"resumed": 0}
    assert one_document(rt.krex("lease", "--json", "0", "--ttl", "60"))["gpu"] == 0
    assert one_document(rt.krex("release", "--json", "0"))["gpu"] == 0
    refused = rt.krex("recycle", "--json", "0")  # no context pool here: the error is the document
    assert refused.returncode == 125 and one_document(refused)["error"]["code"] == "refused"
    assert one_document(rt.krex("trace", "--json", str(rt.trace_path)))["events"] > 0
    keys = one_document(rt.krex("keys", "create", "--json", str(tmp_path / "keys")))
    assert Path(keys["public"]).exists() and Path(keys["secret"]).exists()
    assert "krex" in one_document(rt.krex("completion", "--json", "bash"))["script"]


def test_exit_status_table(rt: Runtime, tmp_path: Path) -> None:
    assert rt.krex("run", "--", "true").returncode == 0
    assert rt.krex("run", "--", "sh", "-c", "exit 7").returncode == 7
    assert rt.krex("run", "--", "sh", "-c", "kill -9 $$").returncode == 128 + 9
    assert rt.krex("run", "--timeout", "0.5", "--", *SLEEP).returncode == 124
    assert rt.krex("run", "--", str(tmp_path / "no-such-program")).returncode == 127
    for usage in (["run"], ["run", "--"], ["submit"], ["frobnicate"], ["status", "--bogus"], ["lease", "zero"], []):
        done = rt.krex(*usage)
        assert done.returncode == 125, (usage, done.stderr)
        assert "Traceback" not in done.stderr
    assert rt.krex("wait", "no-such-command").returncode == 125  # refused by the runtime
    assert rt.krex("trace", str(tmp_path / "missing.jsonl")).returncode == 125
    assert rt.krex("status", "--json", "--watch").returncode == 125
    nobody = subprocess.run([*command("krex"), "--run-dir", str(tmp_path / "none"), "status"], capture_output=True, text=True)
    assert nobody.returncode == 125


@pytest.mark.parametrize("doc", ["README.md", "docs/api.md"])
def test_exit_status_table_is_documented(doc: str) -> None:
    text = (REPO / doc).read_text()
    for status, meaning in EXIT_STATUS_TABLE:
        assert f"| {status} | {meaning} |" in text, f"{doc} lacks the row for {status}"


def test_closed_pipe_ends_quietly(rt: Runtime) -> None:
    krex = shlex.join(command("krex"))
    for pipeline in (f"{krex} status | true", f"{krex} run -- seq 300000 | head -1"):
        done = subprocess.run(
            ["bash", "-c", pipeline + '; echo "krex=${PIPESTATUS[0]}" >&2'], env=rt.env, capture_output=True, text=True,
            timeout=120,
        )
        assert done.stderr.strip().splitlines()[-1] == "krex=141", (pipeline, done.stderr)
        assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    wait_until(lambda: not json.loads(rt.krex("status", "--json").stdout)["commands"], 30, "seq to be cancelled")


def test_status_shows_no_enter_time_before_a_region() -> None:
    status = NodeStatus.from_record({
        "node": "n", "policy": "krex", "pid": 1, "uptime_s": 1.0, "paused": False, "stopping": False, "queued": 0,
        "totals": {}, "commands": [],
        "gpus": [{"index": 0, "name": "GPU", "simulated": True, "slots": 4, "running": [], "queued": 0,
                  "last_region": {}, "pool": {}}],
    })
    out = Console(width=200, record=True, file=io.StringIO())
    out.print(status_view(status))
    text = out.export_text()
    gpu_row = next(line for line in text.splitlines() if line.startswith("0 "))
    assert "nan" not in text and gpu_row.split()[-2:] == ["-", "open"]
    assert "no command queued or running" in text


def test_status_lists_running_commands_and_cancel_says_the_state_after(rt: Runtime) -> None:
    assert "running commands" in rt.krex("status", "--help").stdout
    victim = rt.krex("submit", "--label", "long-one", "--", *SLEEP).stdout.strip()
    wait_until(lambda: victim in rt.krex("status").stdout, 30, "the command in status")
    row = next(line for line in rt.krex("status").stdout.splitlines() if line.startswith(victim))
    assert "running" in row and "long-one" in row and "time.sleep(60)" in row
    assert rt.krex("cancel", victim).stdout == f"{victim}: cancelled\n"  # the state after the cancel


def test_trace_summarises_regions_and_leases(rt: Runtime) -> None:
    """Entry and hold quantiles, and each region's exclusivity verdict counted
    per GPU (regions.py alone on its GPU: every one `verified`), in --json
    and in the text's VERDICTS column; leases apart."""
    assert rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "3", "--kernel-us", "200").returncode == 0
    assert rt.krex("lease", "0", "--ttl", "60").returncode == 0
    assert rt.krex("release", "0").returncode == 0
    summary = one_document(rt.krex("trace", "--json", str(rt.trace_path)))
    gpu = summary["regions_per_gpu"]["0"]
    assert gpu["granted"] >= 3 and gpu["enter_s"]["n"] >= 3 and gpu["hold_s"]["p99"] >= gpu["hold_s"]["p50"]
    assert set(gpu["verdicts"]) == {"verified"} and gpu["verdicts"]["verified"] >= 3
    assert gpu["settled"] == 0 and gpu["settle_total_s"] == 0  # the GPU was settled: no region waited for the clock
    assert summary["leases"]["granted"] >= 1 and summary["leases"]["reasons"]
    text = rt.krex("trace", str(rt.trace_path)).stdout
    assert "ENTER p99 ms" in text and "HOLD p50 ms" in text and "SETTLED (s)" in text and "leases:" in text

    # One verdict per region released on GPU 0 (the module's earlier regions included), none of a lease.
    events = [json.loads(line) for line in rt.trace_path.read_text().splitlines()[1:] if line.strip()]
    leases = {e["region"] for e in events if e["type"] == "region_granted" and e.get("kind") == "lease"}
    released = [e for e in events if e["type"] == "region_released" and e["gpu"] == 0 and e["region"] not in leases]
    counts: dict[str, int] = {}
    for e in released:
        counts[e["verdict"]] = counts.get(e["verdict"], 0) + 1
    assert gpu["verdicts"] == counts, (gpu["verdicts"], counts)
    row = next(line for line in text.splitlines() if line.split()[:1] == ["0"])
    assert "VERDICTS" in text and row.endswith(", ".join(f"{k} {v}" for k, v in sorted(counts.items()))), row


def test_every_positional_argument_has_help() -> None:
    def parsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    for p in parsers(build_parser("test")):
        for action in p._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{p.prog}: positional {action.dest!r} has no help text"


def test_no_runtime_hint_works_as_written(tmp_path: Path, native_built: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run([*command("krex"), "--run-dir", str(run_dir), "status"], capture_output=True, text=True)
    assert done.returncode == 125 and len(done.stderr.strip().splitlines()) == 1
    suggested = re.findall(r"`(krex-runtime[^`]*)`", done.stderr)
    assert suggested, done.stderr
    # On this machine (no GPU) the simulated one is the hint to follow; as root it goes through a config.
    line = next((s for s in suggested if "--sim" in s), None) or suggested[0] + " --sim 1"
    if "FILE" in line:
        config = tmp_path / "krex.toml"
        assert "`krex config default`" in done.stderr, done.stderr  # a config the package ships, not a checkout's file
        text = subprocess.run([*command("krex"), "config", "default"], capture_output=True, text=True, check=True).stdout
        text = text.replace('lock_dir = ""', f'lock_dir = "{tmp_path / "locks"}"')
        text = text.replace('simulated_device = "default"', f'simulated_device = "hint{os.getpid()}"')
        config.write_text(text.replace("allow_root = false", "allow_root = true"))
        line = line.replace("FILE", str(config))
    proc = subprocess.Popen([*command("krex-runtime"), *shlex.split(line)[1:]], stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: proc.poll() is not None or (run_dir / "control.sock").exists(), 60, "the runtime to start")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        ok = subprocess.run([*command("krex"), "--run-dir", str(run_dir), "status", "--json"], capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0
        remove_device(f"hint{os.getpid()}")


def default_sigint() -> None:
    """Before exec: SIGINT as a terminal gives it. A runner started in the
    background by a shell without job control (`nohup ... &`) passes SIGINT
    on ignored, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Its output once it has ended after a SIGINT; one that does not end is
    described (its signal state, where it waits, its cgroup) and killed."""
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        facts = []
        for name in ("status", "wchan", "cgroup", "stack"):
            try:
                text = Path(f"/proc/{proc.pid}/{name}").read_text()
            except OSError as exc:
                text = str(exc)
            if name == "status":
                text = "".join(line for line in text.splitlines(True) if line.startswith(("State", "Sig", "Shd")))
            facts.append(f"{name}: {text.strip()}")
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"pid {proc.pid} did not end after SIGINT\n" + "\n".join(facts) + f"\nstderr: {err[-3000:]}") from None


def test_watch_redraws_until_interrupted(rt: Runtime) -> None:
    """Into a pipe each frame is written whole as it is drawn (a reader sees
    it while krex still runs), as plain text."""
    watch = subprocess.Popen([*command("krex"), "status", "--watch", "0.2"], env=rt.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    assert watch.stdout is not None
    first = [watch.stdout.readline() for _ in range(3)]
    assert first[0].startswith("node ") and first[2].startswith("GPU "), first
    while watch.stdout.readline() != "\n":  # the end of the first frame
        pass
    assert watch.stdout.readline().startswith("node ")  # the next frame came too, krex still running
    assert watch.poll() is None
    watch.send_signal(signal.SIGINT)
    out, err = interrupted(watch)
    assert watch.returncode == 130 and "Traceback" not in err, err
    assert "\x1b[" not in "".join(first) + out  # into a pipe: plain text, no escape codes


def in_terminal(rt: Runtime, columns: int, *args: str) -> str:
    """What `krex ARGS` shows on a terminal `columns` wide (a pty), escape codes taken out."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in rt.env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([*command("krex"), *args], env=env, stdin=slave, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: krex closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")


def test_status_at_80_columns_keeps_ids_and_headers_whole(rt: Runtime) -> None:
    """The GPU's name and the command line give way; the ids stay copyable
    into `krex cancel` and no header is cut."""
    victim = rt.krex("submit", "--label", "eighty", "--", PY, "-c", "import time; time.sleep(60)  # " + "x" * 120).stdout.strip()
    try:
        wait_until(lambda: victim in rt.krex("status").stdout, 30, "the command in status")
        text = in_terminal(rt, 80, "status")
        lines = text.splitlines()
        assert all(len(line) <= 80 for line in lines), text
        headers = next(line for line in lines if line.startswith("GPU ")).split()
        assert headers == ["GPU", "NAME", "RUN", "SLOT", "QUEUE", "POOL", "REGION", "RQ", "FRZ", "GRANTED", "ENTER", "ms",
                           "STATE"], text
        assert next(line for line in lines if line.startswith("ID ")).split() == [
            "ID", "STATE", "GPU", "MODE", "FOR", "LABEL", "COMMAND"], text
        row = next(line for line in lines if "eighty" in line)
        assert row.split()[0] == victim, text
        assert rt.krex("cancel", row.split()[0]).stdout == f"{victim}: cancelled\n"
    finally:
        rt.krex("cancel", victim)


def test_shell_completion_completes_subcommands_and_options(tmp_path: Path) -> None:
    answers = tmp_path / "completions"

    def complete(line: str) -> list[str]:
        env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash", "COMP_LINE": line,
               "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(answers)}
        subprocess.run(command("krex"), env=env, check=True, timeout=60)
        return answers.read_text().split()

    assert complete("krex sta") == ["status"]
    assert complete("krex run --mo") == ["--mode"]
    assert "pooled" in complete("krex run --mode ")
    assert {"run", "report", "list"} <= set(complete("krex bench "))  # krex bench's own parser
    assert {"--scale", "--seed", "--settle-long-s"} <= set(complete("krex bench run --s"))
    assert complete("krex bench report --o") == ["--out"]
    script = subprocess.run([*command("krex"), "completion", "bash"], capture_output=True, text=True)
    assert script.returncode == 0 and "complete " in script.stdout and "krex" in script.stdout
    powershell = subprocess.run([*command("krex"), "completion", "powershell"], capture_output=True, text=True)
    assert powershell.returncode == 0 and "Register-ArgumentCompleter" in powershell.stdout and "krex" in powershell.stdout


def test_ctrl_c_cancels_the_command_and_reports_how_it_ended(rt: Runtime) -> None:
    run = subprocess.Popen([*command("krex"), "run", "--", PY, "-u", "-c", "print('started'); import time; time.sleep(60)"],
                           env=rt.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    assert run.stdout is not None and run.stdout.readline() == "started\n"
    run.send_signal(signal.SIGINT)
    _, err = interrupted(run)
    assert "cancelling" in err and "cancelled" in err and "Traceback" not in err, err
    assert run.returncode in (128 + signal.SIGTERM, 128 + signal.SIGKILL), err


def test_readme_lists_every_subcommand_once_per_doc() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## The `krex` command"):]
    section = section[: section.index("```", section.index("```") + 3)]
    sub = next(a for a in build_parser("test")._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        assert f"krex {name}" in section, f"README's krex section lacks `krex {name}`"
    for words in ("krex bench list", "krex keys create", "krex --version"):
        assert words in section
    listed = re.findall(r"^- (docs/\S+)", readme, re.M)
    assert len(listed) == len(set(listed)), f"a doc is listed twice: {listed}"
    # Each subcommand's synopsis (its lines, up to the next `krex`) names every option it takes,
    # and every value of an option with choices (the modes).
    for name, parser in sub.choices.items():
        if name in ("bench", "history"):  # its own program's options (krex bench --help); ls's alias
            continue
        synopsis = _synopsis(section, name)
        for action in parser._actions:
            flags = [f for f in action.option_strings if f.startswith("--")]
            if not flags or flags[0] in ("--help", "--json", "--wait"):
                continue
            shown = synopsis + (" " + _synopsis(section, "run") if name == "submit" else "")  # [same options]
            assert any(f in shown for f in flags), f"README: `krex {name}` lacks {flags[0]}"
            for choice in action.choices or ():
                assert choice in shown, f"README: `krex {name} {flags[0]}` lacks {choice}"


def _synopsis(section: str, name: str) -> str:
    """The README's lines of `krex NAME`: from its line to the next `krex`."""
    return " ".join(re.findall(rf"(?:^|/ )krex {re.escape(name)}\b.*(?:\n(?!krex ).*)*", section, re.M))


def test_run_help_describes_every_mode() -> None:
    sub = next(a for a in build_parser("test")._actions if isinstance(a, argparse._SubParsersAction))
    mode = next(a for a in sub.choices["run"]._actions if "--mode" in a.option_strings)
    for choice in mode.choices:
        assert f"{choice}, " in mode.help, f"krex run --help does not describe --mode {choice}"
