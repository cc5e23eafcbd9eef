-- Channels: persistent messages with cursors (broadcast) or single delivery (queue).
CREATE TABLE channels (
    tenant_id            text NOT NULL,
    name                 text NOT NULL,
    scope                text NOT NULL DEFAULT 'global',
    semantic             text NOT NULL DEFAULT 'broadcast',
    default_ttl_seconds  integer,
    max_messages         integer,
    description          text NOT NULL DEFAULT '',
    created_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name),
    CONSTRAINT channels_scope_ck CHECK (scope IN ('agent', 'user', 'global')),
    CONSTRAINT channels_semantic_ck CHECK (semantic IN ('queue', 'broadcast'))
);

CREATE TABLE channel_messages (
    id            bigserial PRIMARY KEY,
    tenant_id     text NOT NULL,
    channel       text NOT NULL,
    scope_id      text NOT NULL,
    payload       jsonb NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    claimed_by    text,
    claimed_at    timestamptz
);
CREATE INDEX channel_messages_stream_ix ON channel_messages (tenant_id, channel, scope_id, id);

CREATE TABLE channel_cursors (
    tenant_id   text NOT NULL,
    channel     text NOT NULL,
    scope_id    text NOT NULL,
    consumer    text NOT NULL,
    cursor      bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, channel, scope_id, consumer)
);
