"""Bodies over Lambda's 6 MB payload limit, for the API function (a large snapshot's export or
restore, a long transcript).

API Gateway hands a request to Lambda and takes its answer back in one synchronous invocation,
whose request and response payloads are each limited to 6 MB; past it the client gets a 5xx and
the work is lost. With `TREADLE_TRANSFERS_BUCKET` set:

- **answers**: a response whose body is over `TREADLE_TRANSFER_INLINE_BYTES` (default 5,000,000)
  is written to S3 (`<prefix>/responses/<id>`, with the response's Content-Type and
  Content-Disposition) and answered `303 See Other`, `Location` a presigned GET of it
  (`TREADLE_TRANSFER_URL_SECONDS`, default 900). HTTP clients follow it (curl -L, fetch, httpx
  with `follow_redirects`) and drop the bearer on the way to another origin, which a presigned
  URL must not carry anyway. loomcycle's wire is unchanged: `GET /v1/_snapshots/{id}/export`
  and `GET /v1/_snapshots/{id}` still answer the document, one redirect away.
- **requests**: `POST /v1/_transfers` (any authenticated caller: the API's own `GET /v1/_whoami`
  decides) answers `{upload_id, url, method: "PUT", header: "X-Treadle-Body-Upload",
  expires_in}`; the client PUTs the request's body to `url`, then sends the request with
  `X-Treadle-Body-Upload: <upload_id>` and no body. The function reads the body from S3 before
  the API sees the request, which then applies its own checks (the caller's scopes,
  `TREADLE_MAX_REQUEST_BYTES`) as to any body.

Unset bucket: nothing changes (the sidecar has no such limit and never loads this module).
Objects are kept for the bucket's lifecycle (infra: one day) so a retried request still finds its
upload. boto3 is synchronous and the handler is too: these calls run inline.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
from dataclasses import dataclass
from typing import Any

UPLOAD_HEADER = "x-treadle-body-upload"
TRANSFERS_PATH = "/v1/_transfers"


def _error(status: int, code: str, message: str) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"content-type": "application/json"},
            "body": json.dumps({"code": code, "error": message}), "isBase64Encoded": False}


def _body_bytes(resp: dict[str, Any]) -> bytes:
    body = resp.get("body") or ""
    if resp.get("isBase64Encoded"):
        return base64.b64decode(body)
    return body.encode() if isinstance(body, str) else bytes(body)


@dataclass
class Transfers:
    """S3 under `bucket`/`prefix` for bodies over `inline_bytes`; `client`: a boto3 S3 client or a
    function making one on first use."""

    client_factory: Any
    bucket: str
    prefix: str = "transfers"
    inline_bytes: int = 5_000_000
    url_seconds: int = 900

    @property
    def client(self) -> Any:
        if not hasattr(self.client_factory, "put_object"):
            self.client_factory = self.client_factory()
        return self.client_factory

    def _key(self, kind: str, ident: str) -> str:
        return f"{self.prefix.strip('/')}/{kind}/{ident}" if self.prefix.strip("/") else f"{kind}/{ident}"

    # -- answers -------------------------------------------------------------------------------

    def offload(self, resp: dict[str, Any]) -> dict[str, Any]:
        """`resp` unchanged when its body fits; else the body in S3 and a 303 to it."""
        body = _body_bytes(resp)
        if len(body) <= self.inline_bytes:
            return resp
        headers = {k.lower(): v for k, v in (resp.get("headers") or {}).items()}
        key = self._key("responses", "rsp_" + secrets.token_hex(16))
        put: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body,
                               "ContentType": headers.get("content-type", "application/octet-stream")}
        if "content-disposition" in headers:
            put["ContentDisposition"] = headers["content-disposition"]
        self.client.put_object(**put)
        url = self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": key},
                                                 ExpiresIn=self.url_seconds)
        note = {"code": "see_other", "location": url, "bytes": len(body), "status": resp.get("statusCode"),
                "error": f"the answer is {len(body)} bytes, over what a Lambda response carries: "
                         "follow Location (a presigned URL, no bearer)"}
        return {"statusCode": 303, "headers": {"location": url, "content-type": "application/json",
                                               "cache-control": "no-store"},
                "body": json.dumps(note), "isBase64Encoded": False}

    # -- requests ------------------------------------------------------------------------------

    def new_upload(self) -> dict[str, Any]:
        upload_id = "up_" + secrets.token_hex(16)
        url = self.client.generate_presigned_url("put_object",
                                                 Params={"Bucket": self.bucket, "Key": self._key("uploads", upload_id)},
                                                 ExpiresIn=self.url_seconds)
        return {"upload_id": upload_id, "url": url, "method": "PUT", "header": "X-Treadle-Body-Upload",
                "expires_in": self.url_seconds}

    def with_uploaded_body(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """`event` with the body its upload header names (None: no such header); an error
        response (as a dict with `statusCode`) when the upload is unknown."""
        headers = event.get("headers") or {}
        upload_id = next((v for k, v in headers.items() if k.lower() == UPLOAD_HEADER), None)
        if upload_id is None:
            return None
        if not (isinstance(upload_id, str) and upload_id.startswith("up_") and upload_id[3:].isalnum()):
            return _error(400, "upload_invalid", "X-Treadle-Body-Upload: not an upload id")
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self._key("uploads", upload_id))
        except Exception as exc:
            if type(exc).__name__ == "NoSuchKey" or "NoSuchKey" in str(exc) or "Not Found" in str(exc):
                return _error(400, "upload_missing", f"no uploaded body {upload_id} (expired, or never PUT)")
            raise
        body: bytes = obj["Body"].read()
        out = copy.copy(event)
        out["headers"] = {k: v for k, v in headers.items() if k.lower() not in (UPLOAD_HEADER, "content-length")}
        out["headers"]["content-length"] = str(len(body))
        out["body"], out["isBase64Encoded"] = base64.b64encode(body).decode(), True
        return out


def is_transfers_request(event: dict[str, Any]) -> bool:
    http = (event.get("requestContext") or {}).get("http") or {}
    return str(event.get("rawPath") or "") == TRANSFERS_PATH and str(http.get("method", "")).upper() == "POST"


def whoami_probe(event: dict[str, Any]) -> dict[str, Any]:
    """The same caller's `GET /v1/_whoami` (its headers, no body): the API decides who it is."""
    probe = copy.deepcopy(event)
    probe["rawPath"], probe["rawQueryString"], probe["body"], probe["isBase64Encoded"] = "/v1/_whoami", "", None, False
    probe["headers"] = {k: v for k, v in (probe.get("headers") or {}).items()
                        if k.lower() not in ("content-length", "content-type")}
    http = probe.setdefault("requestContext", {}).setdefault("http", {})
    http["method"], http["path"] = "GET", "/v1/_whoami"
    probe["routeKey"] = "ANY /{proxy+}"
    return probe


def transfers_answer(whoami: dict[str, Any], transfers: Transfers) -> dict[str, Any]:
    """`POST /v1/_transfers`: an upload for an authenticated caller, else the API's own refusal."""
    if whoami.get("statusCode") != 200:
        return whoami
    return {"statusCode": 201, "headers": {"content-type": "application/json", "cache-control": "no-store"},
            "body": json.dumps(transfers.new_upload()), "isBase64Encoded": False}
