"""treadle's A2A 1.0 server driven by the official `a2a-sdk` client over real loopback HTTP, on
both bindings: a task is a run (send, stream, resume a stream, input required → answer,
cancel, list)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import ParseDict

from tests.a2a.conftest import TOKEN


@asynccontextmanager
async def client(base_url: str, binding: str = "JSONRPC", *, streaming: bool = False) -> AsyncIterator[Any]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding])
        c = await create_client(base_url, client_config=config)
        try:
            yield c
        finally:
            await c.close()


def message(text: str, *, skill: str | None = None, task_id: str = "") -> pb.SendMessageRequest:
    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text=text)], task_id=task_id)
    if skill is not None:
        ParseDict({"skillId": skill}, msg.metadata)
    return pb.SendMessageRequest(message=msg)


async def last_task(c: Any, request: pb.SendMessageRequest) -> pb.Task:
    task: pb.Task | None = None
    async for event in c.send_message(request):
        if event.HasField("task"):
            task = event.task
    assert task is not None
    return task


async def test_card_lists_the_exposed_agents_only(base_url: str) -> None:
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{base_url}/.well-known/agent-card.json")).json()
    assert [s["id"] for s in card["skills"]] == ["echo", "asker", "chat", "forever"]
    assert {(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]} == {
        ("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "0.3")}
    assert card["url"].endswith("/a2a/jsonrpc") and card["protocolVersion"] == "0.3"  # 0.3 clients too
    assert card["capabilities"]["streaming"] is True and card["capabilities"].get("pushNotifications") is True


async def test_binding_needs_the_bearer(base_url: str) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{base_url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                                                "params": {"id": "r_x"}})
    assert resp.status_code == 401


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_send_completes_and_get_and_list_read_the_run(base_url: str, binding: str) -> None:
    async with client(base_url, binding) as c:
        task = await last_task(c, message("hello over a2a", skill="echo"))
        assert task.status.state == pb.TASK_STATE_COMPLETED
        [artifact] = task.artifacts
        assert "hello over a2a" in artifact.parts[0].text
        got = await c.get_task(pb.GetTaskRequest(id=task.id))
        assert got.id == task.id and got.status.state == pb.TASK_STATE_COMPLETED
        assert [m.role for m in got.history] == [pb.ROLE_USER, pb.ROLE_AGENT]
        async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            run = (await http.get(f"/v1/runs/{task.id}")).json()  # the task is the run
        assert run["status"] == "completed" and run["agent"] == "echo"
        listed = await c.list_tasks(pb.ListTasksRequest(page_size=100, include_artifacts=True))
        assert task.id in [t.id for t in listed.tasks]


async def test_unknown_skill_and_task_are_refused(base_url: str) -> None:
    async with client(base_url) as c:
        with pytest.raises(InvalidParamsError, match="hidden"):
            await last_task(c, message("x", skill="hidden"))
        with pytest.raises(InvalidParamsError, match="skillId: required"):
            await last_task(c, message("x"))
        with pytest.raises(TaskNotFoundError):
            await c.get_task(pb.GetTaskRequest(id="r_nope"))


async def test_input_required_then_answer_completes(base_url: str) -> None:
    async with client(base_url) as c:
        task = await last_task(c, message("paint it", skill="asker"))
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "which colour?"
        done = await last_task(c, message("blue", task_id=task.id))
        assert done.id == task.id and done.status.state == pb.TASK_STATE_COMPLETED
        assert done.artifacts[0].parts[0].text == "painted it"


async def test_interactive_task_continues_with_the_next_message(base_url: str) -> None:
    async with client(base_url) as c:
        first = await last_task(c, message("first line", skill="chat"))
        assert first.status.state == pb.TASK_STATE_INPUT_REQUIRED
        second = await last_task(c, message("second line", task_id=first.id))
        assert second.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert "second line" in second.status.message.parts[0].text
        cancelled = await c.cancel_task(pb.CancelTaskRequest(id=first.id))
        assert cancelled.id == first.id


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_stream_then_resume_a_cut_stream(base_url: str, binding: str) -> None:
    async with client(base_url, binding, streaming=True) as c:
        seen: list[Any] = []
        async for event in c.send_message(message("stream me", skill="echo")):
            seen.append(event)
        states = [e.status_update.status.state for e in seen if e.HasField("status_update")]
        assert states[-1] == pb.TASK_STATE_COMPLETED
        assert any(e.HasField("artifact_update") for e in seen)
        # a long task: cut the stream after its first event, then subscribe again and cancel
        stream = c.send_message(message("go", skill="forever"))
        first = await anext(aiter(stream))
        await stream.aclose()
        task_id = first.task.id
        resumed = c.subscribe(pb.SubscribeToTaskRequest(id=task_id))
        again = await anext(aiter(resumed))
        assert again.task.id == task_id and again.task.status.state in (pb.TASK_STATE_SUBMITTED,
                                                                         pb.TASK_STATE_WORKING)
        cancelled = await c.cancel_task(pb.CancelTaskRequest(id=task_id))
        assert cancelled.id == task_id
        final = None
        async for event in resumed:
            if event.HasField("status_update"):
                final = event.status_update.status.state
        assert final == pb.TASK_STATE_CANCELED


async def test_an_a2a_0_3_client_is_served_on_the_same_endpoint(base_url: str) -> None:
    """0.3's `message/send` (no A2A-Version header) through the SDK's compat layer."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "kind": "message", "role": "user", "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": "old client"}], "metadata": {"skillId": "echo"}}}}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        out = (await http.post(f"{base_url}/a2a/jsonrpc", json=body)).json()
    task = out["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed", out
    assert "old client" in task["artifacts"][0]["parts"][0]["text"]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_push_configs_set_get_list_delete(base_url: str, binding: str) -> None:
    """A task's push configs are stored per task (delivery: tests/e2e/test_a2a_crash.py); a bad URL
    and credentials this process could not keep across a restart are refused by name."""
    async with client(base_url, binding) as c:
        task = await last_task(c, message("hello", skill="echo"))
        made = await c.create_task_push_notification_config(pb.TaskPushNotificationConfig(
            task_id=task.id, id="mine", url="http://127.0.0.1:9/hook", token="tok-1",
            authentication=pb.AuthenticationInfo(scheme="Bearer")))
        assert (made.id, made.task_id, made.url, made.token) == ("mine", task.id, "http://127.0.0.1:9/hook", "tok-1")
        got = await c.get_task_push_notification_config(pb.GetTaskPushNotificationConfigRequest(
            task_id=task.id, id="mine"))
        assert got.authentication.scheme == "Bearer" and not got.authentication.credentials
        listed = await c.list_task_push_notification_configs(pb.ListTaskPushNotificationConfigsRequest(
            task_id=task.id))
        assert [x.id for x in listed.configs] == ["mine"]
        with pytest.raises(InvalidParamsError, match="url"):
            await c.create_task_push_notification_config(pb.TaskPushNotificationConfig(
                task_id=task.id, url="ftp://example.com/x"))
        with pytest.raises(InvalidParamsError, match="TREADLE_CREDENTIALS_KEY"):
            await c.create_task_push_notification_config(pb.TaskPushNotificationConfig(
                task_id=task.id, url="https://example.com/x",
                authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="s3cret")))
        await c.delete_task_push_notification_config(pb.DeleteTaskPushNotificationConfigRequest(
            task_id=task.id, id="mine"))
        listed = await c.list_task_push_notification_configs(pb.ListTaskPushNotificationConfigsRequest(
            task_id=task.id))
        assert list(listed.configs) == []
        with pytest.raises(TaskNotFoundError):
            await c.get_task_push_notification_config(pb.GetTaskPushNotificationConfigRequest(
                task_id=task.id, id="mine"))
