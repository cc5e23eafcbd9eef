"""The Path tree and Documents over HTTP (loomcycle's POST /v1/_path and /v1/_document): the
tool's op input in, its JSON answer out. Every field the tool takes rides along (see the Path and
Document tools' input schemas); the tool refuses, by name, any it does not know."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from treadle.wire._base import Request


class PathOp(Request):
    """Body of POST /v1/_path: the Path tool's input. The tree is the caller's (`?scope_id=`
    names another subject's tree of the caller's tenant)."""

    model_config = ConfigDict(extra="allow")
    op: str = Field(description="resolve | ls | stat | mkdir | mv | rm")
    scope: str | None = Field(default=None, description="agent (default) | user | tenant")
    path: str | None = None


class DocumentOp(Request):
    """Body of POST /v1/_document: the Document tool's input."""

    model_config = ConfigDict(extra="allow")
    op: str = Field(
        description="create_document | get_document | delete_document | set_path | create_chunk | "
        "get_chunk | update_chunk | delete_chunk | move_chunk | link_chunks | unlink_chunks | "
        "get_edges | query_chunks | define_type | list_types | history | get_version | "
        "export_md | import_md"
    )
    scope: str | None = Field(default=None, description="user (default) | agent | tenant")
