"""Routes built on first use.

Building a FastAPI route is most of what declaring it costs: the endpoint's dependency analysis
and a pydantic adapter per body and response model, and with them the schemas of the wire models
it names (`treadle.wire` models defer their build). A cloud function serves a few of the API's
~65 routes per execution environment, so treadle's routers declare `LazyAPIRoute`: what routing
needs to match a request — the path, its compiled regex and parameter convertors, the methods,
the name — is set when the route is declared, and the rest (`APIRoute.__init__`, in place, then
the wire models it names and its adapters) on the first read of anything else: the route's `app`
when a request first matches it (~2 ms, at most ~5), its fields when the OpenAPI document is built
(every route, on the document's first request), its attributes when `include_router` reads them.
After that it is an ordinary APIRoute.

`build_all()` builds every route declared so far: a SnapStart INIT calls it, so the snapshot holds
built routes (`treadle_cloud.http`). `prime_fastapi()` does at INIT what FastAPI does once per
process on whichever route it builds first.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, get_args

from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.warnings import UnsupportedFieldAttributeWarning
from starlette.routing import compile_path, get_name

#: every lazy route declared in this process (route objects live as long as their module)
_DECLARED: list[LazyAPIRoute] = []


class LazyAPIRoute(APIRoute):
    """An APIRoute whose build waits for its first use (see the module's docstring)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        # what matching a request and reversing a name read; all else is built on first read
        self.path = path
        self.endpoint = endpoint
        name = kwargs.get("name")
        self.name = get_name(endpoint) if name is None else name
        self.path_regex, self.path_format, self.param_convertors = compile_path(path)
        methods = kwargs.get("methods")
        self.methods = {method.upper() for method in (["GET"] if methods is None else methods)}
        self.include_in_schema = kwargs.get("include_in_schema", True)
        self._lazy_args: tuple[str, Callable[..., Any], dict[str, Any]] | None = (path, endpoint, kwargs)
        _DECLARED.append(self)

    @property
    def built(self) -> bool:
        return self._lazy_args is None

    def build(self) -> None:
        """Build the route now (once): what APIRoute does when it is declared."""
        args = self._lazy_args
        if args is None:
            return
        self._lazy_args = None
        path, endpoint, kwargs = args
        with warnings.catch_warnings():
            # what FastAPI ignores when it makes a field's adapter (a body's `alias`): treadle's wire
            # models defer their build (treadle.wire._base), and so do the adapters FastAPI makes
            # for them — they are built here, with the route, not on its first validation
            warnings.simplefilter("ignore", UnsupportedFieldAttributeWarning)
            super().__init__(path, endpoint, **kwargs)
            for annotation, adapter in self._adapters():
                for model in _models(annotation):
                    _complete(model, set())  # the models' own validators, which the adapter then reuses
                adapter.rebuild()

    def _adapters(self) -> Iterator[tuple[Any, Any]]:
        """The pydantic adapters of the route's fields (body, parameters, responses), with the
        annotation each validates."""
        fields = [self.body_field, self.response_field, self.stream_item_field, *self.response_fields.values()]
        todo = [self.dependant]
        while todo:
            dep = todo.pop()
            fields += [*dep.path_params, *dep.query_params, *dep.header_params, *dep.cookie_params, *dep.body_params]
            todo += dep.dependencies
        for field in fields:
            adapter = getattr(field, "_type_adapter", None)  # FastAPI's ModelField (fastapi._compat.v2)
            if field is not None and adapter is not None and not adapter.pydantic_complete:
                yield field.field_info.annotation, adapter

    def __getattr__(self, name: str) -> Any:
        # only called for an attribute the instance does not have yet: everything the build sets
        if name.startswith("__") or self.__dict__.get("_lazy_args") is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.build()
        return getattr(self, name)


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation names (`X | None`, `list[X]`, `Annotated[X, ...]` …)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models(arg)


def _complete(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    """Build a deferred model's validator, the models its fields name first: each is built once
    and reused by those that contain it (built inside another, a deferred model stays deferred)."""
    if model in seen or model.__pydantic_complete__:
        return
    seen.add(model)
    for field in model.model_fields.values():
        for inner in _models(field.annotation):
            _complete(inner, seen)
    model.model_rebuild()


def prime_fastapi() -> None:
    """FastAPI's once-per-process work, done on the first route it builds whichever that is (it
    imports pydantic.v1 for a compatibility check, ~15 ms): every request builds a route, so an
    HTTP function does it at INIT (treadle_cloud.http) with a route of its own that serves nothing —
    what the cold-start floor's one route costs (scripts/coldstart_ratios.py) — not at its first
    request."""

    class _Body(BaseModel):
        x: int = 0

    async def _echo(body: Any) -> Any:
        return body

    _echo.__annotations__ = {"body": _Body, "return": _Body}  # a body and an answer, as the floor's route
    APIRoute("/_prime", _echo, methods=["POST"])


def build_all() -> int:
    """Build every lazy route declared so far; answers how many were built now."""
    todo = [route for route in _DECLARED if not route.built]
    for route in todo:
        route.build()
    return len(todo)
