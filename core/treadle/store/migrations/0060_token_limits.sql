-- Budgets (issue 42 item 2): token and cost limits per tenant, user and agent over a calendar
-- month or a UTC day — loomcycle's `token_limits` (0054) with treadle's agent scope, its day
-- window and a cost metric. A row's absence is "unlimited"; a NULL soft or hard limit leaves that
-- tier unset. The usage a limit counts is usage_daily (0045), summed over the window when a run is
-- admitted and at each iteration boundary (treadle/store/limits.py); no counter here.
CREATE TABLE IF NOT EXISTS token_limits (
    tenant_id   text NOT NULL,
    scope       text NOT NULL CHECK (scope IN ('tenant', 'user', 'agent')),
    scope_id    text NOT NULL DEFAULT '',
    "window"    text NOT NULL DEFAULT 'month' CHECK ("window" IN ('month', 'day')),
    metric      text NOT NULL DEFAULT 'tokens' CHECK (metric IN ('tokens', 'cost')),
    currency    text NOT NULL DEFAULT 'USD',
    soft_limit  double precision CHECK (soft_limit >= 0),
    hard_limit  double precision CHECK (hard_limit >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, scope, scope_id, "window", metric)
);
SELECT treadle_isolate_tenant('token_limits'::regclass);


-- which tenants have any limit: a process caches the set (store/limits.py) whoever asks first —
-- a request acting for one tenant (row security) must still read every tenant's
CREATE OR REPLACE FUNCTION treadle_limited_tenants() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    SELECT DISTINCT tenant_id FROM token_limits
$fn$;
