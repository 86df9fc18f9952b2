"""An ASGI middleware in front of the service's APIs: requests that cannot be valid, or that lack the operator's
token, are refused before any parsing with a JSON error: 401 (no bearer token; health probes are exempt), 413 (body
over the limit, by length or as it streams), 400 (bad Content-Length, multipart without boundary), 415 (not JSON).
Client errors are logged in one line without content and answered in the declared error shape; an overloaded
service's 503 gets a Retry-After and a clear body, and one log line; ``/docs.json`` is fixed."""

from __future__ import annotations

import hmac
import json
import logging
import os
from pathlib import Path

PROBES = frozenset({"/livez", "/readyz", "/healthz"})  # orchestrators' health checks: never behind the token
MIN_TOKEN_CHARS = 16


def api_token(env=os.environ) -> str | None:
    """The bearer token the service requires, from ``LMPIPE_API_TOKEN`` or the file named by
    ``LMPIPE_API_TOKEN_FILE``, stripped; None: no auth. ValueError for a token under 16 characters."""
    token, source = env.get("LMPIPE_API_TOKEN"), "LMPIPE_API_TOKEN"
    if env.get("LMPIPE_API_TOKEN_FILE"):
        path = Path(env["LMPIPE_API_TOKEN_FILE"])
        try:
            token, source = path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ValueError(f"LMPIPE_API_TOKEN_FILE: cannot read {path} ({exc.strerror})") from None
    if token is None or not token.strip():
        return None
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{source}: the API token must be at least {MIN_TOKEN_CHARS} characters "
                         "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def body_limit(limits: dict) -> int:
    """Bytes a valid request can need: every text at its longest, JSON-escaped (6 bytes a character at most),
    and 64 KiB for the rest."""
    return int(limits["max_texts"]) * int(limits["max_chars"]) * 6 + 65536


class _TooLarge(Exception):
    pass


async def _read_body(receive, max_bytes: int) -> list[dict] | None:
    """The request's messages up to its last body part (or a disconnect), or None once the body passes
    ``max_bytes`` (the rest is not read)."""
    messages, seen = [], 0
    while True:
        messages.append(await receive())
        if messages[-1].get("type") != "http.request":
            return messages
        seen += len(messages[-1].get("body", b""))
        if seen > max_bytes:
            return None
        if not messages[-1].get("more_body"):
            return messages


def _replay(messages: list[dict], receive):
    """An ASGI ``receive`` that gives ``messages`` again, in order, then defers to ``receive``."""
    pending = list(messages)

    async def replayed():
        return pending.pop(0) if pending else await receive()

    return replayed


async def _reject(send, status: int, message: str, headers: tuple = ()) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def client_error_body(raw: bytes) -> bytes:
    """A 4xx JSON body in the declared error shape, ``{"error": str, "detail": str}``; BentoML's lists
    of pydantic errors become ``field: message`` lines."""
    try:
        data = json.loads(raw)
    except ValueError:
        return json.dumps({"error": raw.decode("utf-8", "replace")[:500]}).encode("utf-8")
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict) or not isinstance(data.get("error"), str):
        return json.dumps({"error": "bad request", "detail": json.dumps(data)[:2000]}).encode("utf-8")
    out = {"error": data["error"]}
    detail = data.get("detail")
    if isinstance(detail, list):
        detail = "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])) or 'body'}: {d.get('msg', '')}"
                           if isinstance(d, dict) else str(d) for d in detail)
    if detail is not None:
        out["detail"] = detail if isinstance(detail, str) else json.dumps(detail)
    return json.dumps(out).encode("utf-8")


def is_json(content_type: str) -> bool:
    """A ``Content-Type`` naming JSON: ``application/json`` or a ``+json`` type, any parameters aside."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


UNSUPPORTED = {"type": "object", "required": ["error"],
               "properties": {"error": {"type": "string"}, "detail": {"type": "string"}}}


def openapi_fixed(raw: bytes) -> bytes:
    """BentoML's OpenAPI spec with request bodies that have required fields marked ``required``, and the
    guard's 415 declared on every operation that takes a body."""
    spec = json.loads(raw)
    for ops in spec.get("paths", {}).values():
        for op in ops.values():
            body = op.get("requestBody") if isinstance(op, dict) else None
            if isinstance(body, dict) and any(m.get("schema", {}).get("required")
                                               for m in body.get("content", {}).values()):
                body["required"] = True
            if isinstance(body, dict) and isinstance(op.get("responses"), dict):
                op["responses"].setdefault("415", {
                    "description": "Unsupported Media Type: the body is not JSON",
                    "content": {"application/json": {"schema": UNSUPPORTED}}})
    return json.dumps(spec).encode("utf-8")


def _rewrite_json(send, when, transform, headers: tuple = ()):
    """An ASGI ``send`` that holds a JSON response whose status satisfies ``when`` until its body is whole, and
    sends ``transform(body)`` instead (with its own Content-Length, and ``headers`` added); every other message
    passes through."""
    held: dict | None = None
    chunks: list[bytes] = []

    async def rewriting(message):
        nonlocal held
        if message.get("type") == "http.response.start":
            kind = dict(message.get("headers", [])).get(b"content-type", b"")
            if when(message.get("status", 200)) and kind.startswith(b"application/json"):
                held = message
                return
        elif message.get("type") == "http.response.body" and held is not None:
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = transform(b"".join(chunks))
            kept = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            start, held = {**held, "headers": kept + [(b"content-length", str(len(body)).encode()), *headers]}, None
            await send(start)
            return await send({"type": "http.response.body", "body": body})
        await send(message)

    return rewriting


def overloaded_body(retry_after_s: int):
    """The 503 body BentoML's overload path gets instead of its generic one (adaptive batching refuses what it
    cannot serve within ``max_latency_ms``)."""
    body = json.dumps({"error": "overloaded", "detail": "the service is at capacity: retry after "
                       f"{retry_after_s} s (the Retry-After header)"}).encode("utf-8")
    return lambda raw: body


def client_error_summary(exc: BaseException) -> str | None:
    """One line for a request the client got wrong (a validation error, or a BentoML error with a 4xx code),
    naming the fields at fault but never their values; None for anything else (a server error)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        where = sorted({".".join(str(p) for p in e["loc"]) or "body" for e in exc.errors(include_input=False)})
        kinds = sorted({e["type"] for e in exc.errors(include_input=False)})
        return f"{exc.error_count()} validation error(s) at {', '.join(where)} ({', '.join(kinds)})"
    code = getattr(getattr(exc, "error_code", None), "value", None)
    if isinstance(code, int) and 400 <= code < 500:
        return f"{type(exc).__name__} ({code}): {exc}"
    return None


class ClientErrorLogFilter(logging.Filter):
    """Turn BentoML's ERROR-with-traceback for a client error (which quotes the user's input) into one
    INFO line naming the path and fields at fault; server errors keep their traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not str(record.msg).startswith("Exception on"):
            return True
        if getattr(getattr(exc, "error_code", None), "value", None) == 503:  # overload: expected, not a fault
            record.msg, record.args = "Overloaded %s [%s]: refused with 503 and Retry-After (%s)", (
                *(record.args or ()), exc)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        summary = client_error_summary(exc)
        if summary is not None:
            record.msg, record.args = "Rejected %s [%s]: %s", (*(record.args or ()), summary)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


BENTOML_REQUEST_LOGGER = "bentoml._internal.server.http_app"  # where bentoml logs "Exception on <path>"


def install_log_filter() -> None:
    logger = logging.getLogger(BENTOML_REQUEST_LOGGER)
    if not any(isinstance(f, ClientErrorLogFilter) for f in logger.filters):
        logger.addFilter(ClientErrorLogFilter())


class RequestGuard:
    """ASGI middleware (``Service.add_asgi_middleware(RequestGuard, max_bytes=..., token=...)``)."""

    def __init__(self, app, max_bytes: int, token: str | None = None, retry_after_s: int = 1,
                 api_paths: frozenset[str] | None = None) -> None:
        self.app, self.max_bytes, self.retry_after_s = app, max_bytes, retry_after_s
        self.expected = f"Bearer {token}".encode("utf-8") if token else None
        self.api_paths = api_paths  # the POST routes that take a body; None: every POST

    def _takes_body(self, scope) -> bool:
        """The APIs are POST only: a PUT or a POST to a probe is the app's 405, not a media-type error."""
        if scope.get("method") != "POST":
            return False
        return scope.get("path") in self.api_paths if self.api_paths is not None else True

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.expected is not None and scope.get("path") not in PROBES:
            if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
                return await _reject(send, 401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                                     ((b"www-authenticate", b'Bearer realm="lmpipe"'),))
        if scope.get("method") == "GET" and scope.get("path") == "/docs.json":
            return await self.app(scope, receive, _rewrite_json(send, lambda status: status == 200, openapi_fixed))
        if not self._takes_body(scope):  # other methods and paths: the app's own 404 or 405
            return await self.app(scope, receive, send)
        ctype = headers.get(b"content-type", b"").decode("latin-1").lower()
        if ctype.startswith("multipart/") and "boundary=" not in ctype:
            return await _reject(send, 400, "multipart body without a boundary in its Content-Type; the APIs take "
                                            "JSON (content-type: application/json)")
        if not is_json(ctype):  # none at all included: a client that sends JSON says so
            media = ctype.split(";", 1)[0].strip()[:100]
            return await _reject(send, 415, (f"unsupported media type {media!r}" if media else "no Content-Type")
                                 + ": the APIs take JSON (content-type: application/json)")
        length = headers.get(b"content-length")
        if length is not None:
            try:
                n = int(length)
            except ValueError:
                return await _reject(send, 400, "Content-Length is not a number")
            if n > self.max_bytes:
                return await _reject(send, 413, f"request body of {n} bytes is over the limit of {self.max_bytes}")
        if length is None:  # a chunked body: read it first (it is bounded), so an oversized one never reaches the app
            messages = await _read_body(receive, self.max_bytes)
            if messages is None:
                return await _reject(send, 413, f"request body over the limit of {self.max_bytes} bytes")
            receive = _replay(messages, receive)
        seen, started = 0, False

        async def counted_receive():
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        overloaded = _rewrite_json(send, lambda status: status == 503, overloaded_body(self.retry_after_s),
                                   ((b"retry-after", str(self.retry_after_s).encode()),))
        rewriting = _rewrite_json(overloaded, lambda status: 400 <= status < 500, client_error_body)

        async def tracked_send(message):
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await rewriting(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except _TooLarge:
            if started:
                raise
            await _reject(send, 413, f"request body over the limit of {self.max_bytes} bytes")
