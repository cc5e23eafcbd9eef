-- A2A push notifications (issue 37), both sides.
--
-- a2a_push_configs: the push configs a peer set on one of this treadle's tasks (a task is a run;
-- tasks/pushNotificationConfig/set, or a SendMessage's configuration). The maintenance pass delivers
-- each task state change to each config at least once (store/a2apush.py): `delivered_state` is the
-- A2A TaskState last delivered, `seen_status` the run status the last look saw (a look is due when
-- the run's status moved off it), `next_attempt_at` the retry's backoff. `auth_sealed`: the
-- authentication credentials, sealed like run credentials (TREADLE_CREDENTIALS_KEY).
CREATE TABLE IF NOT EXISTS a2a_push_configs (
    tenant_id       text        NOT NULL,
    task_id         text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    config_id       text        NOT NULL,
    url             text        NOT NULL,
    token           text        NOT NULL DEFAULT '',
    auth_scheme     text        NOT NULL DEFAULT '',
    auth_sealed     bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    seen_status     text,
    delivered_state integer     NOT NULL DEFAULT 0,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, task_id, config_id)
);
CREATE INDEX IF NOT EXISTS a2a_push_configs_due ON a2a_push_configs (next_attempt_at);
SELECT treadle_isolate_tenant('a2a_push_configs'::regclass);

-- a2a_calls: this treadle's calls of remote A2A agents (treadle/a2a/): one row per tool call, made
-- before the message is sent. `token` is what the peer sends back with a push notification
-- (X-A2A-Notification-Token): the push route finds the call by it and pokes `wait_key`, where the
-- calling run is parked. `remote_task_id`: the task the peer answered with.
CREATE TABLE IF NOT EXISTS a2a_calls (
    tenant_id      text        NOT NULL,
    run_id         text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tool_use_id    text        NOT NULL,
    token          text        NOT NULL UNIQUE,
    wait_key       text        NOT NULL,
    peer           text        NOT NULL,
    remote_task_id text,
    pushes         integer     NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_use_id)
);
SELECT treadle_isolate_tenant('a2a_calls'::regclass);
