"""The node agent without Ray or a runtime: what it does with what its
runtime tells it (krex_cluster/agent.py; the cluster tests run it for real)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from krex_cluster.agent import Followed, NodeAgent
from krex_cluster.link import with_node


class FakeLink:
    """Answers `wait` with a result record, as a runtime would."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def request(self, verb: str, body: dict[str, Any], timeout_s: float, **_: Any) -> dict[str, Any]:
        self.asked.append((verb, body))
        return {"ok": True, "body": {"id": body["id"], "state": "finished", "exit_code": 0}}

    def unfollow(self, request_id: str) -> None:
        pass


def agent_following(local: str) -> tuple[NodeAgent, Followed]:
    agent = NodeAgent("n1", {"runtime": "attach", "run_dir": "/nonexistent"})
    agent.epoch, agent._changed = 1, asyncio.Event()
    cmd = Followed("c1-1", {"argv": ["true"]}, 1, "r-1", local=local)
    agent.commands[cmd.cid], agent.by_request[cmd.request_id], agent.by_local[local] = cmd, cmd.cid, cmd.cid
    return agent, cmd


def test_a_result_whose_push_was_lost_is_asked_for_once_the_runtime_no_longer_lists_it() -> None:
    async def scenario() -> tuple[NodeAgent, FakeLink]:
        agent, _ = agent_following("L1")
        link = FakeLink()
        agent._reconcile(link, {"commands": [{"id": "L1"}]})  # still listed: nothing asked
        agent._reconcile(link, {"commands": []})
        await asyncio.sleep(0)
        assert not link.asked  # once unlisted could be a push on its way
        agent._reconcile(link, {"commands": []})
        agent._reconcile(link, {"commands": []})
        await asyncio.sleep(0.01)
        return agent, link

    agent, link = asyncio.run(scenario())
    assert link.asked == [("wait", {"id": "L1", "attach": False})]
    results = [item for item in agent.outbox if item[0] == "result"]
    assert len(results) == 1 and results[0][1] == "c1-1"
    assert results[0][2]["id"] == "c1-1" and results[0][2]["node"] == "n1" and results[0][2]["node_command_id"] == "L1"
    assert "c1-1" not in agent.commands and "c1-1" in agent.finished
    # The push that was thought lost arrives after all: not reported again.
    agent._on_push("r-1", {"type": "result", "body": {"id": "L1", "state": "finished"}})
    assert len([item for item in agent.outbox if item[0] == "result"]) == 1


def test_a_lost_runtime_reports_each_of_its_commands_once() -> None:
    async def scenario() -> NodeAgent:
        agent, _ = agent_following("L1")
        agent.alive = True
        pending = Followed("c1-2", {"argv": ["true"]}, 1, "r-2")  # its submit has no reply yet
        agent.commands[pending.cid] = pending
        agent._lose("runtime gone: killed by SIGKILL")
        agent._lose("runtime gone: killed by SIGKILL")
        return agent

    agent = asyncio.run(scenario())
    lost = [item for item in agent.outbox if item[0] == "lost"]
    assert lost == [["lost", "c1-1", {"reason": "runtime gone: killed by SIGKILL", "started": False}]]
    assert not agent.alive and agent.reason == "runtime gone: killed by SIGKILL"


def test_telemetry_gets_its_node_without_being_parsed_again() -> None:
    assert with_node(b'{"seq":3,"type":"x"}', "n1") == b'{"node":"n1","seq":3,"type":"x"}'
    assert with_node(b"{}", "n1") == b'{"node":"n1"}'


def test_an_agent_attached_to_a_runtime_follows_it_through_a_restart(make_runtime: Any) -> None:
    """`runtime = "attach"`: the agent never starts or stops the runtime; it
    follows commands, sees the runtime go (unanswered), its commands lost
    once, and the runtime back as a new epoch."""
    rt = make_runtime()
    spec = {"runtime": "attach", "run_dir": str(rt.run_dir), "lost_after_s": 1.0, "restart_delay_s": 0.2,
            "poll_interval_s": 0.1}

    async def drain_until(agent: NodeAgent, done: Any, what: str) -> list[Any]:
        seen: list[Any] = []
        for _ in range(200):
            batch = await agent.drain(0.2, -1)
            seen += batch["items"]
            await asyncio.sleep(0.05)
            if done(batch, seen):
                return seen
        raise AssertionError(f"timed out waiting for {what}: {seen}")

    async def scenario() -> None:
        agent = NodeAgent("n1", spec)
        info = await agent.start(30)
        assert info["alive"] and info["epoch"] == 1 and len(info["gpus"]) == 2
        reply = await agent.submit("c-1", {"argv": ["sh", "-c", "echo hi"]}, {})
        assert reply["ok"]
        seen = await drain_until(agent, lambda b, s: any(i[0] == "result" for i in s), "the result")
        assert ["output", "c-1", {"id": "c-1", "stream": "stdout", "data": "hi\n"}] in seen
        result = next(i[2] for i in seen if i[0] == "result")
        assert result["id"] == "c-1" and result["exit_code"] == 0 and result["node_command_id"] == reply["body"]["id"]
        assert (await agent.submit("c-2", {"argv": ["sleep", "30"]}, {}))["ok"]
        await drain_until(agent, lambda b, s: ["started", "c-2", {}] in s, "c-2 started")
        await asyncio.to_thread(rt.stop, signal.SIGKILL)  # no result for c-2 will ever come
        seen = await drain_until(agent, lambda b, s: not b["info"]["alive"], "the runtime gone")
        assert [i for i in seen if i[0] in ("lost", "result")] == [
            ["lost", "c-2", {"reason": "runtime gone: unanswered for 1 s", "started": True}]]
        await asyncio.to_thread(rt.start)
        await drain_until(agent, lambda b, s: b["info"]["alive"] and b["info"]["epoch"] == 2, "the runtime back")
        assert (await agent.submit("c-3", {"argv": ["true"]}, {}))["ok"]
        await drain_until(agent, lambda b, s: any(i[0] == "result" and i[1] == "c-3" for i in s), "c-3's result")
        await agent.stop()
        assert rt.proc is not None and rt.proc.poll() is None  # attached: the agent never stops the runtime

    asyncio.run(scenario())


def test_a_result_pushed_before_its_submit_reply_is_taken_names_the_runtime_command() -> None:
    """A trivial command can end before the agent's submit has taken its
    reply: the result still says which runtime command it was (the gateway
    takes a result only from the command it runs as)."""

    async def scenario() -> NodeAgent:
        agent, _ = agent_following("")
        agent._on_push("r-1", {"type": "output", "body": {"id": "L9", "stream": "stdout", "data": "x"}})
        agent._on_push("r-1", {"type": "result", "body": {"id": "L9", "state": "finished"}})
        return agent

    agent = asyncio.run(scenario())
    result = next(item for item in agent.outbox if item[0] == "result")[2]
    assert (result["id"], result["node_command_id"]) == ("c1-1", "L9")
