-- Snapshots (0066) get the tenant policy every table with a tenant_id has (0021): a tenant-bound
-- session sees its own tenant's snapshots only — never the operator's whole-runtime ones
-- (tenant_id NULL is nobody's tenant) — whatever a route's query asks; the operator's unbound
-- sessions are not narrowed. tests/tenancy/test_database_isolation.py holds every such table to it.
SELECT treadle_isolate_tenant('snapshots'::regclass);
