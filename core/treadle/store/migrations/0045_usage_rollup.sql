-- Usage and cost (issue 42 item 1): every model call's `usage` event is rolled up, in the
-- transaction that appends it, into one row per tenant, user, agent, AgentDef, provider, model,
-- currency and UTC day — so the figures are exact (a step's commit happens once, under its lease
-- fence: a crashed step's events and their roll-up vanish together) and a report never scans the
-- transcript. Priced from `usage_prices` (the operator's `pricing:` table, written at open): cost is
-- fixed when the call is recorded, a later price edit never rewrites history; a call whose
-- (provider, model) has no price counts in `unpriced_calls` with cost 0, never a guess.
CREATE TABLE IF NOT EXISTS usage_prices (
    provider     text NOT NULL,
    model        text NOT NULL,
    input        double precision NOT NULL DEFAULT 0,  -- per million tokens
    output       double precision NOT NULL DEFAULT 0,
    cache_write  double precision NOT NULL DEFAULT 0,
    cache_read   double precision NOT NULL DEFAULT 0,
    currency     text NOT NULL DEFAULT 'USD',
    PRIMARY KEY (provider, model)
);

CREATE TABLE IF NOT EXISTS usage_daily (
    tenant_id              text NOT NULL,
    day                    date NOT NULL,
    user_id                text NOT NULL DEFAULT '',
    agent                  text NOT NULL DEFAULT '',
    def_id                 text NOT NULL DEFAULT '',
    provider               text NOT NULL DEFAULT '',
    model                  text NOT NULL DEFAULT '',
    currency               text NOT NULL DEFAULT '',
    calls                  bigint NOT NULL DEFAULT 0,
    input_tokens           bigint NOT NULL DEFAULT 0,
    output_tokens          bigint NOT NULL DEFAULT 0,
    cache_creation_tokens  bigint NOT NULL DEFAULT 0,
    cache_read_tokens      bigint NOT NULL DEFAULT 0,
    cost                   double precision NOT NULL DEFAULT 0,
    unpriced_calls         bigint NOT NULL DEFAULT 0,
    -- runs add to one of 16 rows per key (by run id): concurrent commits of one tenant's, user's
    -- and agent's runs do not queue on one row lock; reports sum the shards
    shard                  smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, user_id, agent, def_id, provider, model, currency, shard)
);
SELECT treadle_isolate_tenant('usage_daily'::regclass);

CREATE OR REPLACE FUNCTION treadle_usage_rollup() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
DECLARE
    u   jsonb := coalesce(NEW.payload -> 'usage', '{}'::jsonb);
    r   record;
    p   record;
    prv text := coalesce(u ->> 'provider', '');
    mdl text := coalesce(u ->> 'model', '');
    i   bigint := coalesce((u ->> 'input_tokens')::bigint, 0);
    o   bigint := coalesce((u ->> 'output_tokens')::bigint, 0);
    cw  bigint := coalesce((u ->> 'cache_creation_input_tokens')::bigint, 0);
    cr  bigint := coalesce((u ->> 'cache_read_input_tokens')::bigint, 0);
    priced boolean;
BEGIN
    SELECT coalesce(user_id, '') AS user_id, agent, coalesce(def_id, '') AS def_id INTO r
      FROM runs WHERE id = NEW.run_id;
    SELECT * INTO p FROM usage_prices WHERE provider = prv AND model = mdl;
    priced := FOUND;
    INSERT INTO usage_daily AS d (tenant_id, day, user_id, agent, def_id, provider, model, currency, calls,
                                  input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens,
                                  cost, unpriced_calls, shard)
    VALUES (NEW.tenant_id, (NEW.created_at AT TIME ZONE 'UTC')::date, coalesce(r.user_id, ''),
            coalesce(r.agent, ''), coalesce(r.def_id, ''), prv, mdl,
            CASE WHEN priced THEN p.currency ELSE '' END, 1, i, o, cw, cr,
            CASE WHEN priced THEN (i * p.input + o * p.output + cw * p.cache_write + cr * p.cache_read) / 1e6
                 ELSE 0 END,
            CASE WHEN priced THEN 0 ELSE 1 END, abs(hashtext(NEW.run_id)) % 16)
    ON CONFLICT (tenant_id, day, user_id, agent, def_id, provider, model, currency, shard) DO UPDATE SET
        calls = d.calls + 1,
        input_tokens = d.input_tokens + EXCLUDED.input_tokens,
        output_tokens = d.output_tokens + EXCLUDED.output_tokens,
        cache_creation_tokens = d.cache_creation_tokens + EXCLUDED.cache_creation_tokens,
        cache_read_tokens = d.cache_read_tokens + EXCLUDED.cache_read_tokens,
        cost = d.cost + EXCLUDED.cost,
        unpriced_calls = d.unpriced_calls + EXCLUDED.unpriced_calls;
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS events_usage_rollup ON events;
CREATE TRIGGER events_usage_rollup AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.type = 'usage') EXECUTE FUNCTION treadle_usage_rollup();
