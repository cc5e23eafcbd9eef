-- Tenant isolation enforced by the database (issue 16: "one accessor, not per-call discipline").
-- Every table with a tenant_id column gets row-level security with one policy for the role
-- `treadle_tenant`: a row is visible and writable only when its tenant_id equals the
-- transaction's `treadle.tenant` setting. The pool takes that role for a tenant-scoped checkout
-- (store/scope.py: BEGIN; set_config('role', 'treadle_tenant', true), set_config('treadle.tenant',
-- T, true) … COMMIT — transaction-local, so a pooler such as RDS Proxy never carries it over).
-- The table owner (workers, sweepers, migrations, the operator's cross-tenant routes) is not
-- subject to the policies: RLS is enabled, not forced.
-- auth_tokens stays outside: authentication reads it before any tenant is known, and an operator
-- mints tokens for other tenants.
DO $$
BEGIN
    CREATE ROLE treadle_tenant NOLOGIN NOSUPERUSER NOINHERIT NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- roles are per cluster: another database of this server created it
END
$$;
DO $$
BEGIN
    -- a non-superuser owner (Aurora's master user) must be a member to take the role
    EXECUTE format('GRANT treadle_tenant TO %I', current_user);
EXCEPTION WHEN OTHERS THEN
    NULL;  -- a superuser needs no membership; a concurrent grant is the same grant
END
$$;
GRANT USAGE ON SCHEMA public TO treadle_tenant;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO treadle_tenant;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO treadle_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO treadle_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO treadle_tenant;

CREATE OR REPLACE FUNCTION treadle_isolate_tenant(tbl regclass) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', tbl);
    EXECUTE format($p$CREATE POLICY tenant_isolation ON %s TO treadle_tenant
                      USING (tenant_id = current_setting('treadle.tenant', true))
                      WITH CHECK (tenant_id = current_setting('treadle.tenant', true))$p$, tbl);
END
$fn$;

DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'auth_tokens'
    LOOP
        PERFORM treadle_isolate_tenant(t);
    END LOOP;
END
$$;

-- memory_embeddings is created lazily (where pgvector exists, possibly long after this
-- migration): the creator now isolates it too, and runs as its owner, so a tenant-scoped caller
-- can trigger the creation without the right to create tables.
ALTER FUNCTION treadle_ensure_vector_memory() RENAME TO treadle_ensure_vector_table;
CREATE FUNCTION treadle_ensure_vector_memory() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
BEGIN
    IF NOT treadle_ensure_vector_table() THEN
        RETURN false;
    END IF;
    IF NOT (SELECT relrowsecurity FROM pg_class WHERE oid = 'memory_embeddings'::regclass) THEN
        PERFORM treadle_isolate_tenant('memory_embeddings'::regclass);
    END IF;
    RETURN true;
END
$fn$;
