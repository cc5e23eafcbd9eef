"""Channels: declare, publish, peek, await, subscribe, ack."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from treadle.wire._base import Request, Response

CHANNEL_NAME = r"^[A-Za-z0-9_.:/-]{1,128}$"
ChannelScope = Literal["agent", "user", "global"]


class ChannelRequest(Request):
    """Body of POST /v1/_channels."""

    name: str = Field(pattern=CHANNEL_NAME)
    scope: ChannelScope = "global"
    semantic: Literal["queue", "broadcast"] = "broadcast"
    default_ttl_seconds: int | None = Field(default=None, gt=0)
    #: loomcycle's name of default_ttl_seconds (seconds; 0 = none)
    default_ttl: int | None = Field(default=None, ge=0)
    max_messages: int | None = Field(default=None, gt=0)
    description: str = ""


class PublishRequest(Request):
    """Body of POST /v1/_channels/{name}/publish: `value` (treadle) or `payload` (loomcycle's
    name); exactly one of them, not null."""

    value: Any = None
    payload: Any = None
    scope_id: str = ""
    ttl_seconds: float | None = Field(default=None, gt=0)
    #: RFC 3339 with an offset; the message is invisible until then (its TTL counts from publish)
    deliver_at: str | None = None


class AwaitRequest(Request):
    """Body of POST /v1/_channels/_await."""

    channels: list[str] = Field(min_length=1, max_length=32)
    mode: Literal["any", "all", "at_least"] = "any"
    n: int = Field(default=1, ge=1)
    scope_id: str = ""
    consumer: str = "http"
    #: loomcycle's: the scope the channels are declared with (checked), and how long to wait for
    #: the condition (polled; at most 30 s)
    scope: ChannelScope | None = None
    wait_ms: int = Field(default=0, ge=0, le=30_000)


class SubscribeRequest(Request):
    """Body of POST /v1/_channels/{name}/subscribe: take up to `max_messages` (queue: claim them;
    broadcast: advance the consumer's cursor)."""

    scope_id: str = ""
    consumer: str = "http"
    max_messages: int = Field(default=10, ge=1, le=100)
    from_cursor: str | None = None
    #: loomcycle's long poll: with nothing to take, wait up to this long for a publish (≤ 30 s)
    wait_ms: int = Field(default=0, ge=0, le=30_000)


class ChannelUpdateRequest(Request):
    """Body of PATCH /v1/_channels/{name} (loomcycle's): the fields given change; 0 clears a
    TTL or a max_messages bound."""

    description: str | None = None
    semantic: Literal["queue", "broadcast"] | None = None
    default_ttl: int | None = Field(default=None, ge=0)
    default_ttl_seconds: int | None = Field(default=None, ge=0)
    max_messages: int | None = Field(default=None, ge=0)


class BroadcastRequest(Request):
    """Body of POST /v1/_channels/_broadcast (loomcycle's): one payload to every channel named."""

    channels: list[str] = Field(min_length=1, max_length=32)
    scope: ChannelScope | None = None
    scope_id: str = ""
    payload: Any = None
    value: Any = None
    deliver_at: str | None = None


class AckRequest(Request):
    """Body of POST /v1/_channels/{name}/ack."""

    cursor: str | int
    scope_id: str = ""
    consumer: str = "http"


# -- responses -------------------------------------------------------------------------------------


class Channel(Response):
    name: str
    scope: str
    semantic: str
    default_ttl_seconds: int | None = None
    max_messages: int | None = None
    description: str = ""
    #: `config` (treadle.yaml) or `api`
    source: str | None = None
    #: loomcycle's name of default_ttl_seconds (0: none)
    default_ttl: int | None = None


class ChannelList(Response):
    channels: list[Channel]


class ChannelDeleted(Response):
    name: str
    deleted: bool


class Message(Response):
    id: int
    value: Any = None
    published_at: str
    visible_at: str | None = None


class Published(Response):
    """202 of a publish: the message, how many parked runs it woke, whether the channel's
    `max_messages` dropped the oldest one."""

    channel: str
    message_id: int
    scope_id: str
    published_at: str
    dropped_oldest: Any = None
    woken: int = 0
    #: a delayed message (deliver_at): when it becomes visible
    visible_at: str | None = None
    #: loomcycle's names of message_id and published_at
    msg_id: str
    created_at: str


class Peeked(Response):
    channel: str
    messages: list[Message]
    cursor: int | None = None


class Subscribed(Response):
    channel: str
    messages: list[Message]
    next_cursor: str
    cursor: int | None = None


class Acked(Response):
    channel: str
    cursor: int | None = None
    acked: bool
    #: loomcycle's answer
    ok: bool | None = None


class ChannelPurged(Response):
    name: str
    purged: int


class BroadcastEntry(Response):
    channel: str
    msg_id: str | None = None
    created_at: str | None = None
    visible_at: str | None = None
    error: str | None = None


class BroadcastResult(Response):
    published: int
    failed: int
    results: list[BroadcastEntry]


class AwaitResult(Response):
    satisfied: bool
    mode: str
    fired: list[str]
    counts: dict[str, int]
    timed_out: bool
