"""Built-in `WebFetch` (external): GET a page through the network guard (the same hosts and
address rules as `HTTP`) and return it as readable text — HTML becomes Markdown (headings,
paragraphs, lists, links, tables) with scripts, styles and other non-content elements dropped.

The page is read up to yaml `http.fetch_max_bytes` (2 MiB); the text returned is capped at
`http.max_response_bytes` (256 KiB) and marked `[truncated at N bytes]` when cut. Plain text and
JSON come back as they are; other content types are refused. A status ≥ 400 is a tool error
carrying the page's text. The HTML libraries (BeautifulSoup, markdownify) are imported on the
first HTML page, never at import time.
"""

from __future__ import annotations

import re
from typing import Any

from treadle.builtins.args import refuse_unknown
from treadle.builtins.http import agent_guard, decode_body, fetch, http_limits, truncation_marker
from treadle.errors import ToolError
from treadle.security.network import Fetched, NetworkSetup
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

#: elements whose content is never page text
DROPPED = ("script", "style", "noscript", "template", "iframe", "svg", "canvas", "object", "embed", "head",
           "form", "button", "select", "input", "textarea", "nav")
TEXT_TYPES = ("text/plain", "text/markdown", "text/csv", "application/json", "text/xml", "application/xml")
HTML_TYPES = ("text/html", "application/xhtml+xml")


def html_to_markdown(data: bytes, charset: str | None) -> tuple[str, str]:
    """(title, Markdown) of an HTML document."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(data, "html.parser", from_encoding=charset)
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    for tag in soup.find_all(DROPPED):
        tag.decompose()
    root = soup.body if soup.body is not None else soup
    markdown = str(MarkdownConverter(heading_style="ATX", bullets="-", strip=["img"]).convert_soup(root))
    markdown = re.sub(r"[ \t]+\n", "\n", markdown)
    markdown = re.sub(r"\n{3,}", "\n\n", markdown).strip()
    return title, markdown


def readable(fetched: Fetched) -> str:
    """The page's text; ToolError when it is not a text page."""
    media = fetched.media_type
    sniffed_html = not media and fetched.body.lstrip()[:1] == b"<"
    if media in HTML_TYPES or sniffed_html:
        title, markdown = html_to_markdown(fetched.body, fetched.charset)
        return (f"Title: {title}\n\n" if title else "") + markdown
    if media.startswith("text/") or media in TEXT_TYPES or media.endswith(("+json", "+xml")) or not media:
        return decode_body(fetched.body, fetched.charset, fetched.truncated).strip()
    raise ToolError(f"WebFetch: {fetched.url} is {media}, not a text page", code="unsupported_content")


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


class WebFetchTool:
    name = "WebFetch"
    effects: ToolEffects = "external"
    description = (
        "Fetch a web page (GET) and return its readable text as Markdown: title, headings, paragraphs, lists, "
        "links and tables; scripts, styles and navigation dropped. url: an http or https URL. Long pages are cut "
        "('[truncated at N bytes]'). Only hosts allowed for this agent and run are reachable."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {"url": {"type": "string", "description": "an http or https URL"}},
        "required": ["url"],
    }

    def __init__(self, network: NetworkSetup | None = None) -> None:
        self.network = network or NetworkSetup()

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        refuse_unknown(args, self.input_schema, "WebFetch")
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ToolError("WebFetch: url is required (an http or https URL)", code="bad_request")
        cfg = ctx.services.config.http
        limits = http_limits(cfg, response_bytes=cfg.fetch_max_bytes)
        guard = await agent_guard(ctx, self.network)
        headers = {"Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}
        try:
            fetched = await fetch(guard, "GET", url.strip(), headers=headers, limits=limits)
        except ToolError as exc:
            raise ToolError(f"WebFetch {url}: {exc.message}", code=exc.code) from None
        text, cut = cap_text(readable(fetched), cfg.max_response_bytes)
        head = f"WebFetch {fetched.url} -> {fetched.status} {fetched.reason}".rstrip()
        if fetched.final_url != fetched.url:
            head += f" (redirected to {fetched.final_url})"
        if fetched.truncated:
            head += f" [page cut at {cfg.fetch_max_bytes} bytes before conversion]"
        out = f"{head}\n\n{text}" + (truncation_marker(cfg.max_response_bytes) if cut else "")
        return ToolResult(out, is_error=fetched.status >= 400)
