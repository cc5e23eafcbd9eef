-- The running byte count of a Memory scope (0041) no longer calls its PL/pgSQL function for an
-- update that keeps the scope and the value's size (a counter going from 1 to 2 — most of
-- Memory.incr): a WHEN clause, evaluated in C as the row is written, skips the trigger's event
-- then; the function itself returns at once in that case, so the count is the same. Inserts and
-- deletes always count. (issue 31: a quarter of the server's added CPU per loop iteration since
-- fea6257 was this trigger and the usage roll-up.)
DROP TRIGGER IF EXISTS memory_scope_bytes ON memory;
CREATE TRIGGER memory_scope_bytes AFTER INSERT OR DELETE ON memory
    FOR EACH ROW EXECUTE FUNCTION treadle_memory_scope_bytes();
CREATE TRIGGER memory_scope_bytes_update AFTER UPDATE ON memory
    FOR EACH ROW
    WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id OR OLD.scope IS DISTINCT FROM NEW.scope
          OR OLD.scope_id IS DISTINCT FROM NEW.scope_id
          OR octet_length(OLD.value::text) IS DISTINCT FROM octet_length(NEW.value::text))
    EXECUTE FUNCTION treadle_memory_scope_bytes();
