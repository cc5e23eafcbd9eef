-- WebSocket watchers (the cloud shape's `ws` function, cloud/treadle_cloud/wswatch.py; issue 19):
-- an API Gateway WebSocket API holds the clients' connections, and the functions that commit a
-- run's events push them to its watchers — no Lambda waits on a watcher.
-- UNLOGGED: a crash loses them (and a replica never has them); the clients reconnect and
-- subscribe again with their last seq, so nothing is lost but a reconnect.
CREATE UNLOGGED TABLE IF NOT EXISTS ws_connections (
    connection_id  text PRIMARY KEY,
    tenant_id      text NOT NULL,
    subject        text NOT NULL,
    connected_at   timestamptz NOT NULL DEFAULT now(),
    -- the last message sent to it (the maintenance function keeps quiet connections alive)
    pushed_at      timestamptz NOT NULL DEFAULT now()
);

CREATE UNLOGGED TABLE IF NOT EXISTS ws_watchers (
    connection_id  text NOT NULL REFERENCES ws_connections (connection_id) ON DELETE CASCADE,
    run_id         text NOT NULL,
    tenant_id      text NOT NULL,
    -- the last seq claimed for this watcher: advanced with greatest() before the events are
    -- posted, under the row's lock, so two pushers never send one seq twice
    cursor         bigint NOT NULL DEFAULT 0,
    subscribed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, run_id)
);
CREATE INDEX IF NOT EXISTS ws_watchers_run ON ws_watchers (run_id);

SELECT treadle_isolate_tenant('ws_connections');
SELECT treadle_isolate_tenant('ws_watchers');
