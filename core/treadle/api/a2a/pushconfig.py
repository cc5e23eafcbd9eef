"""A task's push notification configs as the A2A handler takes and shows them (A2A 1.0
`TaskPushNotificationConfig`; stored by store/a2a.py, delivered by treadle/a2a/push.py).

Checked when set: an http(s) URL with a host (where it may point is the network guard's question,
asked at each delivery), a token of at most 512 characters, an authentication scheme a word. Its
credentials are sealed like run credentials and never shown again — refused where this process
has no `TREADLE_CREDENTIALS_KEY` (an ephemeral key would lose them at the next restart). A config
without an id is the task's `default` one."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, PushNotificationNotSupportedError

from treadle.a2a.tasks import Runtime
from treadle.security.principal import Principal
from treadle.specs.a2a import A2AServerCard
from treadle.store.a2a import A2APushStore, PushConfig

DEFAULT_CONFIG_ID = "default"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,31}$")
_CONFIG_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def push_offered(card: A2AServerCard) -> None:
    if not card.capabilities.push_notifications:
        raise PushNotificationNotSupportedError("push notifications are not offered by this agent "
                                                "(a2a_server_cards: capabilities.push_notifications)")


def push_config(card: A2AServerCard, c: pb.TaskPushNotificationConfig) -> None:
    """Refuse a config by the field that is wrong (InvalidParams), before anything is stored."""
    push_offered(card)
    parts = urlsplit(c.url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(c.url) > 2048:
        raise InvalidParamsError("url: an http(s) URL with a host, at most 2048 characters, is needed")
    if len(c.token) > 512:
        raise InvalidParamsError("token: at most 512 characters")
    if c.id and not _CONFIG_ID.match(c.id):
        raise InvalidParamsError("id: [A-Za-z0-9._:-]{1,128}")
    if c.HasField("authentication"):
        auth = c.authentication
        if not _SCHEME.match(auth.scheme):
            raise InvalidParamsError("authentication.scheme: a word such as Bearer is needed")
        if auth.credentials:
            from treadle.mcp.credentials import process_sealer

            if process_sealer().ephemeral:
                raise InvalidParamsError("authentication.credentials: this treadle keeps no secret across a "
                                         "restart (TREADLE_CREDENTIALS_KEY is not set)")


async def set_push(rt: Runtime, who: Principal, task_id: str, c: pb.TaskPushNotificationConfig
                   ) -> pb.TaskPushNotificationConfig:
    sealed: bytes | None = None
    scheme = ""
    if c.HasField("authentication"):
        scheme = c.authentication.scheme
        if c.authentication.credentials:
            from treadle.mcp.credentials import seal_credentials

            sealed = seal_credentials(who.tenant_id, {"credentials": c.authentication.credentials})
    row = await A2APushStore(rt.pool).put(PushConfig(
        tenant_id=who.tenant_id, task_id=task_id, config_id=c.id or DEFAULT_CONFIG_ID, url=c.url, token=c.token,
        auth_scheme=scheme, auth_sealed=sealed, delivered_state=0, attempts=0))
    return push_view(row)


def push_view(row: PushConfig) -> pb.TaskPushNotificationConfig:
    """A stored config as A2A shows it (its credentials never)."""
    out = pb.TaskPushNotificationConfig(id=row.config_id, task_id=row.task_id, url=row.url, token=row.token)
    if row.auth_scheme:
        out.authentication.scheme = row.auth_scheme
    return out


__all__ = ["DEFAULT_CONFIG_ID", "push_config", "push_offered", "push_view", "set_push"]
