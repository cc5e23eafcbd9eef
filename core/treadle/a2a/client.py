"""Remote A2A agents as agent tools: `a2a__<peer>__<skill>` (loomcycle's names and `a2a_agents:`).

An agent reaches a peer only by listing `a2a__<peer>__<skill>` or `a2a__<peer>__*` (the peer's
`expected_skills`) in its `tools:` — default-deny; the peer is operator config (specs/a2a.py). The
caller is the official `a2a-sdk` client over an httpx client whose transport is the network guard
(security/egress.py): the card, every send and every read go through the floor ∩ agent ∩ caller
host lists and the address rules.

A call is an external tool that parks:

1. first invocation: the call's row (store/a2a.py: its push token and wait key), then `SendMessage`
   with `returnImmediately` — the message id is derived from the run and the tool_use id, so a
   re-run step after a crash sends the same message and the peer answers with the same task —
   with a push config (`a2a_client.push_url` + the token) when the peer's card offers push;
2. a terminal task answers the call (its artifacts' text; FAILED / CANCELED / REJECTED as an
   error); a task still WORKING, SUBMITTED, INPUT_REQUIRED or AUTH_REQUIRED parks the run on the
   call's key with a timed poke `poll_interval_seconds` ahead (store/waits.py): no worker is held;
3. the key is poked by the peer's push (api/a2a/push.py verifies the token and the task id) or by
   the timer (the sweeper's maintenance pass); the re-invoked call reads the task (`GetTask`) and
   answers or parks again. A peer that cannot be reached while the call is parked is read again at
   the next poll; the call fails when `timeout_seconds` (from its first park) pass.

A task that needs input is answered by whoever can answer the peer's question (on the peer: its
Interruption, its task's next message); the call waits for the outcome and shows the question in
its `tool_parked` record."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from treadle.config import TreadleConfig
from treadle.errors import ToolError
from treadle.governance.credentials import TenantCredentials
from treadle.mcp.credentials import load_credentials, mask
from treadle.security.network import NetworkGuard, NetworkSetup
from treadle.specs.a2a import A2AAgentSpec, split_tool_name, tool_name
from treadle.store.a2a import A2ACall, A2ACallStore
from treadle.store.db import Pool
from treadle.store.waits import WaitStore
from treadle.tools.base import Park, Tool, ToolContext, ToolEffects, ToolResult

if TYPE_CHECKING:
    from a2a.client import Client
    from a2a.types import a2a_pb2 as pb

log = logging.getLogger("treadle.a2a")

MAX_RESULT_CHARS = 256 * 1024
#: the SDK's bindings, by treadle.yaml's `binding:`
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON"}
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string",
                               "description": "The message text to send to the remote A2A peer skill."}},
    "required": ["message"],
}


class A2ARefused(ToolError):
    code = "a2a_refused"


def message_id(run_id: str, tool_use_id: str) -> str:
    """The call's message id: the same in every attempt of the step (the peer's idempotency key)."""
    return "treadle-" + hashlib.sha256(f"{run_id}\x00{tool_use_id}".encode()).hexdigest()[:32]


class A2AToolSource:
    """The A2A tools an agent's `tools:` select, per step (the engine's hook, beside MCP's)."""

    def __init__(self, config: TreadleConfig, network: NetworkSetup, pool: Pool, waits: WaitStore) -> None:
        self.config = config
        self.network = network
        self.pool = pool
        self.waits = waits
        self.calls = A2ACallStore(pool)
        self.credentials = TenantCredentials(pool)

    def guard(self, agent_hosts: Sequence[str] | None, caller_hosts: Sequence[str] | None) -> NetworkGuard:
        return self.network.guard(self.config.http.allowed_hosts, agent_hosts, caller_hosts)

    def tools_for(self, names: Sequence[str], agent_hosts: Sequence[str] | None,
                  caller_hosts: Sequence[str] | None) -> list[Tool]:
        out: dict[str, Tool] = {}
        for name in names:
            parts = split_tool_name(name)
            if parts is None:
                continue
            peer, skill = parts
            spec = self.config.a2a_agents.get(peer)
            if spec is None:  # config validation refuses this; a stale AgentDef may still name one
                log.warning("agent tools name A2A peer %r, which is not configured", peer)
                continue
            skills = [s.id for s in spec.expected_skills] if skill == "*" else [skill]
            for s in skills:
                out[tool_name(peer, s)] = A2ATool(self, peer, s, spec, agent_hosts, caller_hosts)
        return [out[k] for k in sorted(out)]

    async def bearer(self, tenant: str, run_id: str, spec: A2AAgentSpec, peer: str) -> dict[str, str]:
        """The credential `auth.bearer_credential_ref` names: the run's, else the tenant's CredentialDef."""
        ref = spec.auth.bearer_credential_ref
        if not ref:
            return {}
        value = (await load_credentials(self.pool, tenant, run_id)).get(ref)
        if value is None:
            value = (await self.credentials.resolve_for_run(tenant, run_id, [ref])).get(ref)
        if value is None:
            raise A2ARefused(f"A2A peer {peer!r}: credential {ref!r} is not set for this run "
                             "(user_credentials or a CredentialDef)", code="credential_missing")
        return {ref: value}

    async def client(self, peer: str, spec: A2AAgentSpec, guard: NetworkGuard,
                     bearer: str | None) -> tuple[Client, pb.AgentCard]:
        """The SDK's client for the peer, its HTTP through the guard (the card too)."""
        import httpx
        from a2a.client import ClientConfig, ClientFactory
        from a2a.client.card_resolver import parse_agent_card
        from a2a.types import a2a_pb2 as pb

        from treadle.security.egress import GuardedTransport

        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        http = httpx.AsyncClient(transport=GuardedTransport(guard), headers=headers, trust_env=False,
                                 timeout=httpx.Timeout(30.0), follow_redirects=False)
        try:
            if spec.agent_card_url:
                resp = await http.get(spec.agent_card_url)
                resp.raise_for_status()
                card = parse_agent_card(resp.json())
            else:
                card = pb.AgentCard(name=peer, supported_interfaces=[pb.AgentInterface(
                    url=spec.endpoint, protocol_binding=BINDINGS[spec.binding], protocol_version="1.0")])
            factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http,
                                                 supported_protocol_bindings=["JSONRPC", "HTTP+JSON"]))
            return factory.create(card), card
        except BaseException:
            await http.aclose()
            raise


class A2ATool:
    """One skill of a remote A2A peer, as the agent sees it (`a2a__<peer>__<skill>`)."""

    effects: ToolEffects = "external"
    input_schema: dict[str, Any] = INPUT_SCHEMA

    def __init__(self, source: A2AToolSource, peer: str, skill: str, spec: A2AAgentSpec,
                 agent_hosts: Sequence[str] | None, caller_hosts: Sequence[str] | None) -> None:
        self.source = source
        self.peer = peer
        self.skill = skill
        self.spec = spec
        self.name = tool_name(peer, skill)
        self.description = f"Call the {skill!r} skill of the remote A2A agent {peer!r} (the answer may take a while)."
        self._hosts = (agent_hosts, caller_hosts)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        text = args.get("message")
        if not isinstance(text, str) or not text.strip():
            return ToolResult("message: a non-empty string is required", is_error=True)
        if set(args) - {"message"}:
            return ToolResult(f"unknown argument(s): {', '.join(sorted(set(args) - {'message'}))}", is_error=True)
        src = self.source
        call = await src.calls.open(ctx.tenant_id, ctx.run_id, ctx.tool_use_id, self.peer)
        if ctx.deadline_passed():
            return ToolResult(f"A2A peer {self.peer!r}: task {call.remote_task_id or '?'} not settled within "
                              f"{self.spec.timeout_seconds:g} s", is_error=True)
        version = await src.waits.version(ctx.tenant_id, call.wait_key)  # before the task is read
        secrets = await src.bearer(ctx.tenant_id, ctx.run_id, self.spec, self.peer)
        try:
            task = await self._settle(ctx, call, text, next(iter(secrets.values()), None))
        except _Unreachable as exc:
            if call.remote_task_id is None:
                raise A2ARefused(f"A2A peer {self.peer!r}: {exc}", code="a2a_unreachable") from None
            log.info("A2A peer %r unreachable while call %s waits (%s): read again at the next poll",
                     self.peer, ctx.tool_use_id, exc)
            return await self._park(ctx, call, version, None)
        from a2a.types import a2a_pb2 as pb

        state = task.status.state
        if state in (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED, pb.TASK_STATE_REJECTED):
            return ToolResult(mask(answer_text(task), secrets), is_error=state != pb.TASK_STATE_COMPLETED)
        return await self._park(ctx, call, version, task)

    async def _settle(self, ctx: ToolContext, call: A2ACall, text: str, bearer: str | None) -> pb.Task:
        import httpx
        from a2a.client.errors import A2AClientError

        try:
            client, card = await self.source.client(self.peer, self.spec, self.source.guard(*self._hosts), bearer)
        except (A2AClientError, httpx.HTTPError, ValueError) as exc:
            raise _Unreachable(f"its card: {exc}") from None
        try:
            return await self._task(client, card, ctx, call, text)
        except (A2AClientError, httpx.HTTPError) as exc:
            raise _Unreachable(str(exc)) from None
        finally:
            await client.close()

    async def _task(self, client: Client, card: pb.AgentCard, ctx: ToolContext, call: A2ACall, text: str) -> pb.Task:
        """The remote task: sent on the first invocation, read afterwards."""
        from a2a.types import a2a_pb2 as pb

        if call.remote_task_id is not None:
            return await client.get_task(pb.GetTaskRequest(id=call.remote_task_id))
        request = pb.SendMessageRequest(message=pb.Message(
            message_id=message_id(ctx.run_id, ctx.tool_use_id), role=pb.ROLE_USER, parts=[pb.Part(text=text)]))
        request.message.metadata.update({"skillId": self.skill})
        request.configuration.return_immediately = True
        push_url = self.source.config.a2a_client.push_url
        if push_url and card.capabilities.push_notifications:
            request.configuration.task_push_notification_config.CopyFrom(
                pb.TaskPushNotificationConfig(id="treadle", url=push_url, token=call.token))
        task: pb.Task | None = None
        async for event in client.send_message(request):
            if event.HasField("task"):
                task = event.task
            elif event.HasField("message"):  # a peer that answers with a message: no task to follow
                return pb.Task(id="", status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED, message=event.message))
        if task is None:
            raise A2ARefused(f"A2A peer {self.peer!r} answered with neither a task nor a message")
        await self.source.calls.set_task(ctx.run_id, ctx.tool_use_id, task.id)
        return task

    async def _park(self, ctx: ToolContext, call: A2ACall, version: int, task: pb.Task | None) -> Park:
        due = datetime.now(UTC) + timedelta(seconds=self.spec.poll_interval_seconds)
        async with self.source.pool.connection() as conn:
            await WaitStore.poke_at(conn, ctx.tenant_id, call.wait_key, due)
        extra: dict[str, Any] = {"peer": self.peer, "skill": self.skill, "task_id": call.remote_task_id}
        if task is not None:
            from a2a.types import a2a_pb2 as pb

            extra["task_id"] = task.id or call.remote_task_id
            extra["state"] = pb.TaskState.Name(task.status.state)
            question = status_text(task)
            if question and task.status.state == pb.TASK_STATE_INPUT_REQUIRED:
                extra["question"] = question[:4096]
        return Park("a2a", {call.wait_key: version}, deadline_s=self.spec.timeout_seconds, extra=extra)


class _Unreachable(Exception):
    """The peer could not be reached or answered garbage (a transport failure, not an A2A error)."""


def status_text(task: pb.Task) -> str:
    return "\n".join(p.text for p in task.status.message.parts if p.WhichOneof("content") == "text")


def answer_text(task: pb.Task) -> str:
    """A settled task as the tool's result: its artifacts' text, else its status message."""
    texts = [p.text for a in task.artifacts for p in a.parts if p.WhichOneof("content") == "text"]
    text = "\n\n".join(texts) or status_text(task)
    if not text:
        from a2a.types import a2a_pb2 as pb

        text = f"(task {task.id} {pb.TaskState.Name(task.status.state)}, no text)"
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "\n[truncated]"


__all__ = ["A2ARefused", "A2ATool", "A2AToolSource", "answer_text", "message_id"]
