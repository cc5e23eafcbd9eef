-- Delayed channel messages (Channel publish `deliver_at`) and timed pokes of wait keys.
--
-- visible_at: when the message becomes readable (publish time, or its deliver_at).
-- pos: its place in the stream, the number cursors count in. A message visible at publish gets
-- pos = id; a delayed one has pos NULL until the first read at or after visible_at gives it the
-- next value of the id sequence, so it sorts after everything readers may already have passed
-- (a broadcast cursor never skips a message that became visible after it moved).
ALTER TABLE channel_messages ADD COLUMN visible_at timestamptz;
ALTER TABLE channel_messages ADD COLUMN pos bigint;
UPDATE channel_messages SET visible_at = published_at, pos = id;
ALTER TABLE channel_messages ALTER COLUMN visible_at SET NOT NULL;
ALTER TABLE channel_messages ALTER COLUMN visible_at SET DEFAULT now();
CREATE INDEX channel_messages_pos_ix ON channel_messages (tenant_id, channel, scope_id, pos)
    WHERE pos IS NOT NULL;
CREATE INDEX channel_messages_pending_ix ON channel_messages (tenant_id, channel, scope_id, visible_at)
    WHERE pos IS NULL;

-- A poke of (tenant_id, key) due at due_at, done by the maintenance pass (RunWaker.wake_due):
-- how a run parked on a channel wakes when a delayed message becomes visible.
CREATE TABLE wait_timers (
    tenant_id  text NOT NULL,
    key        text NOT NULL,
    due_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, key, due_at)
);
CREATE INDEX wait_timers_due_ix ON wait_timers (due_at);
