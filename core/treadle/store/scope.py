"""The tenant a request acts for, enforced by the database (migration 0021).

Every table with a `tenant_id` has row-level security for the role `treadle_tenant`. While a
request's tenant is bound (`bound_tenant`), each connection the pool lends (store/db.py `Pool`)
acts for it: takes that role and sets `treadle.tenant` — for the session on a direct connection
(switched back before anyone unbound borrows it; no round trip when the next borrower is the
same tenant), for one transaction behind a pooler such as RDS Proxy — and Postgres itself hides
and refuses every other tenant's rows, whatever the query says. Stores keep their own
`tenant_id = …` predicates (they use the indexes); this is the one accessor that does not depend
on them.

Unbound code (workers, sweepers, the operator's cross-tenant routes, migrations) runs as the
tables' owner, which the policies do not apply to.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from psycopg import sql

TENANT_ROLE = "treadle_tenant"


@dataclass(slots=True)
class TenantBinding:
    """One request's binding: a mutable holder, so the auth dependency can fill in the tenant
    after the request's context was entered, and clearing it at the end unbinds any task the
    request spawned."""

    tenant_id: str | None = None


_BINDING: ContextVar[TenantBinding | None] = ContextVar("treadle_tenant_binding", default=None)


def current_tenant() -> str | None:
    binding = _BINDING.get()
    return binding.tenant_id if binding is not None else None


@contextmanager
def request_binding() -> Iterator[TenantBinding]:
    """A fresh, empty binding for the duration of one request (the API's middleware)."""
    binding = TenantBinding()
    token = _BINDING.set(binding)
    try:
        yield binding
    finally:
        binding.tenant_id = None
        _BINDING.reset(token)


def bind(tenant_id: str) -> bool:
    """Bind the current request to `tenant_id`; False outside a request binding."""
    binding = _BINDING.get()
    if binding is None:
        return False
    binding.tenant_id = tenant_id
    return True


def unbind() -> None:
    """Act across tenants for the rest of the request (an operator's report, checked by its route)."""
    binding = _BINDING.get()
    if binding is not None:
        binding.tenant_id = None


@contextmanager
def bound_tenant(tenant_id: str) -> Iterator[None]:
    """Bind `tenant_id` for a block (tests, tools acting for one tenant)."""
    with request_binding() as binding:
        binding.tenant_id = tenant_id
        yield


def enter_transaction(tenant_id: str) -> sql.Composed:
    """Behind a transaction pooler, one round trip: open a transaction and take the tenant's role
    and setting for it alone."""
    return sql.SQL(
        "BEGIN; SELECT set_config('role', {role}, true), set_config('treadle.tenant', {tenant}, true)"
    ).format(role=sql.Literal(TENANT_ROLE), tenant=sql.Literal(tenant_id))


def session_statement(tenant_id: str | None) -> sql.Composed:
    """On a direct connection, one round trip: the session acts for `tenant_id` until switched
    back (None: back to the session's own role, the tables' owner)."""
    if tenant_id is None:
        return sql.Composed([sql.SQL("RESET ROLE; RESET treadle.tenant")])
    return sql.SQL(
        "SELECT set_config('role', {role}, false), set_config('treadle.tenant', {tenant}, false)"
    ).format(role=sql.Literal(TENANT_ROLE), tenant=sql.Literal(tenant_id))
