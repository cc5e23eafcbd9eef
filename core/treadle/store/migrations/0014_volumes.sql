-- The agent's workspace (core/treadle/volumes/): ephemeral volume instances (one per top-level
-- run and name, purged when that run ends, or by the sweeper after a crash), the volumes a
-- sub-agent run was granted by its parent (a child never gets more), and the file tools' effect
-- journal (a re-run of a call after a crash recognises its own earlier write).
CREATE TABLE volume_instances (
    root_run_id  text NOT NULL,
    name         text NOT NULL,
    tenant_id    text NOT NULL,
    location     text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (root_run_id, name)
);

CREATE TABLE run_volume_grants (
    run_id      text PRIMARY KEY,
    tenant_id   text NOT NULL,
    grants      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE volume_effects (
    run_id         text NOT NULL,
    tool_use_id    text NOT NULL,
    location       text NOT NULL,
    path           text NOT NULL,
    tenant_id      text NOT NULL,
    before_sha256  text,
    after_sha256   text NOT NULL,
    result         text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_use_id, location, path)
);
