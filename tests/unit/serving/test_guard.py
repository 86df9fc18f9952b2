"""The request guard in front of the service: oversized and unparseable bodies get a 4xx before any parsing, and
with a token set, requests without it get 401."""

from __future__ import annotations

import asyncio
import json

import pytest

from stages.serving.guard import RequestGuard, api_token, body_limit


async def _echo(scope, receive, send):
    """An app that reads the whole body and answers with its length."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def _exchange(app, *, method="POST", path="/classify", headers=(("content-type", "application/json"),),
              chunks=(b"",)) -> list[dict]:
    """Every ASGI message ``app`` sends for one request whose body arrives in ``chunks`` (JSON unless
    ``headers`` say otherwise)."""
    sent, queue = [], list(chunks)

    async def receive():
        body = queue.pop(0) if queue else b""
        return {"type": "http.request", "body": body, "more_body": bool(queue)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": [(k.encode(), v.encode()) for k, v in headers]}
    asyncio.run(app(scope, receive, send))
    return sent


JSON = ("content-type", "application/json")


def _call(app, **request):
    sent = _exchange(app, **request)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def test_a_body_within_the_limit_reaches_the_app():
    app = RequestGuard(_echo, max_bytes=10)
    assert _call(app, headers=[("content-type", "application/json"), ("content-length", "4")],
                 chunks=[b"{}{}"]) == (200, b"4")
    assert _call(app, method="GET") == (200, b"0")


def test_oversized_bodies_get_413_by_length_or_as_they_stream():
    app = RequestGuard(_echo, max_bytes=10)
    status, body = _call(app, headers=[JSON, ("content-length", "11")], chunks=[b"x" * 11])
    assert status == 413 and "11 bytes is over the limit of 10" in json.loads(body)["error"]
    status, body = _call(app, headers=[JSON, ("transfer-encoding", "chunked")], chunks=[b"x" * 6, b"x" * 6])
    assert status == 413 and "over the limit of 10" in json.loads(body)["error"]


def test_an_oversized_chunked_body_gets_413_from_a_framework_that_answers_errors_itself():
    """A Starlette app (as BentoML's) turns an exception while reading the body into a 500: a chunked body over
    the limit must be refused before the app reads it, and one within the limit must reach it whole."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def size(request):
        return PlainTextResponse(str(len(await request.body())))

    app = RequestGuard(Starlette(routes=[Route("/classify", size, methods=["POST"])]), max_bytes=10)
    status, body = _call(app, headers=[JSON, ("transfer-encoding", "chunked")], chunks=[b"x" * 6, b"x" * 6])
    assert status == 413 and "over the limit of 10" in json.loads(body)["error"]
    assert _call(app, headers=[JSON, ("transfer-encoding", "chunked")], chunks=[b"x" * 4, b"x" * 6]) == (200, b"10")


def test_multipart_without_boundary_and_a_bad_length_get_400():
    app = RequestGuard(_echo, max_bytes=10)
    status, body = _call(app, headers=[("content-type", "multipart/form-data")])
    assert status == 400 and "boundary" in json.loads(body)["error"]
    status, body = _call(app, headers=[("content-type", "multipart/form-data; boundary=x")])
    assert status == 415 and "application/json" in json.loads(body)["error"]  # a boundary: still not JSON
    status, body = _call(app, headers=[JSON, ("content-length", "ten")])
    assert status == 400 and "Content-Length" in json.loads(body)["error"]


@pytest.mark.parametrize("ctype", ["multipart/form-data; boundary=x", "application/x-www-form-urlencoded",
                                   "text/plain", "application/octet-stream", "application/vnd.bentoml+pickle",
                                   "Multipart/Form-Data; Boundary=x"])
def test_a_body_that_is_not_json_gets_415_in_the_error_shape(ctype):
    """BentoML 1.4 answered ``multipart/form-data; boundary=x`` with the body ``garbage`` with a 500 (its
    multipart parser fails on it); every API takes JSON, so any other media type is refused before parsing."""
    reached = []

    async def app(scope, receive, send):
        reached.append(scope)
        await _echo(scope, receive, send)

    status, body = _call(RequestGuard(app, max_bytes=100),
                         headers=[("content-type", ctype), ("content-length", "7")], chunks=[b"garbage"])
    error = json.loads(body)
    assert status == 415 and set(error) == {"error"} and "application/json" in error["error"], (status, body)
    assert not reached


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                   "application/merge-patch+json"])
def test_json_bodies_pass(ctype):
    assert _call(RequestGuard(_echo, max_bytes=100), headers=[("content-type", ctype)], chunks=[b"{}"]) == (200, b"2")


def test_a_body_without_a_content_type_gets_415_naming_what_to_send():
    status, body = _call(RequestGuard(_echo, max_bytes=100), headers=[], chunks=[b"{}"])
    assert status == 415 and json.loads(body)["error"].startswith("no Content-Type: the APIs take JSON")


def test_the_default_limit_admits_the_largest_valid_request():
    limits = {"max_texts": 64, "max_chars": 4000}
    largest = json.dumps({"texts": ["\u2603" * 4000] * 64}).encode()  # JSON-escaped: 6 bytes a character
    assert len(largest) <= body_limit(limits)


def test_with_a_token_every_request_but_the_probes_needs_it():
    token = "s3cret-token-of-24-chars"
    app = RequestGuard(_echo, max_bytes=10, token=token)
    for path in ("/classify", "/docs.json", "/lineage", "/metrics"):
        status, body = _call(app, path=path)
        assert status == 401 and "bearer token" in json.loads(body)["error"]
        assert _call(app, path=path, headers=[JSON, ("authorization", "Bearer wrong-token-of-24-chars")])[0] == 401
        assert _call(app, path=path, headers=[JSON, ("authorization", f"Basic {token}")])[0] == 401
        assert _call(app, path=path, headers=[JSON, ("authorization", f"Bearer {token}")])[0] == 200
    for probe in ("/livez", "/readyz", "/healthz"):
        assert _call(app, method="GET", path=probe)[0] == 200
    assert _call(RequestGuard(_echo, max_bytes=10), path="/classify")[0] == 200  # no token: no auth


def test_the_token_comes_from_the_environment_or_a_file_and_must_be_long(tmp_path):
    assert api_token({}) is None and api_token({"LMPIPE_API_TOKEN": "  "}) is None
    assert api_token({"LMPIPE_API_TOKEN": " abcdefghijklmnopq\n"}) == "abcdefghijklmnopq"
    secret = tmp_path / "token"
    secret.write_text("from-a-mounted-secret-file\n")
    assert api_token({"LMPIPE_API_TOKEN_FILE": str(secret)}) == "from-a-mounted-secret-file"
    with pytest.raises(ValueError, match="at least 16 characters"):
        api_token({"LMPIPE_API_TOKEN": "short"})
    with pytest.raises(ValueError, match=f"cannot read {tmp_path / 'missing'}"):
        api_token({"LMPIPE_API_TOKEN_FILE": str(tmp_path / "missing")})


def _answering(status: int, body: bytes, chunked: bool = False):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        if chunked:
            await send({"type": "http.response.body", "body": body[:5], "more_body": True})
            await send({"type": "http.response.body", "body": body[5:]})
        else:
            await send({"type": "http.response.body", "body": body})
    return app


@pytest.mark.parametrize("raw, expected", [
    # bentoml's validation error: detail is a list of pydantic errors
    (b'{"error": "1 validation error for Input", "detail": [{"type": "too_short", "loc": ["texts"], '
     b'"msg": "List should have at least 1 item"}]}',
     {"error": "1 validation error for Input", "detail": "texts: List should have at least 1 item"}),
    # bentoml's InvalidArgument: a one-element list
    (b'[{"error": "the text has no [MASK] token to fill"}]', {"error": "the text has no [MASK] token to fill"}),
    (b'{"error": "fine as it is"}', {"error": "fine as it is"}),
])
def test_client_errors_take_the_shape_the_openapi_spec_declares(raw, expected):
    for chunked in (False, True):
        sent = _exchange(RequestGuard(_answering(400, raw, chunked), max_bytes=100), chunks=[b"{}"])
        start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
        assert start["status"] == 400 and json.loads(body) == expected
        assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()


def test_a_success_passes_through_untouched():
    raw = b'[{"label": "net"}]'
    sent = _exchange(RequestGuard(_answering(200, raw), max_bytes=100), chunks=[b"{}"])
    assert sent[1]["body"] == raw


def test_a_rejected_request_is_logged_in_one_line_without_its_content(caplog):
    import logging

    from pydantic import BaseModel, Field, ValidationError

    from stages.serving.guard import BENTOML_REQUEST_LOGGER, install_log_filter

    class Input(BaseModel):
        texts: list[str]
        top_k: int = Field(ge=1)

    secret = "private-1234"
    try:
        Input.model_validate_json(json.dumps({"texts": ["ok"], "top_k": secret}))
    except ValidationError as exc:
        error = exc
    assert secret in str(error)  # pydantic quotes the input: what the filter keeps out of the logs
    install_log_filter()
    logger = logging.getLogger(BENTOML_REQUEST_LOGGER)
    with caplog.at_level(logging.INFO, logger=BENTOML_REQUEST_LOGGER):
        try:
            raise error
        except ValidationError:
            logger.error("Exception on %s [%s]", "/classify", "POST", exc_info=True)
        try:
            raise RuntimeError("a real server fault")
        except RuntimeError:
            logger.error("Exception on %s [%s]", "/classify", "POST", exc_info=True)
    client, server = caplog.records[-2:]
    assert client.levelname == "INFO" and client.exc_info is None
    assert client.getMessage() == "Rejected /classify [POST]: 1 validation error(s) at top_k (int_parsing)"
    assert secret not in caplog.text
    assert server.levelname == "ERROR" and server.exc_info is not None  # a server fault keeps its traceback


def test_an_overloaded_service_answers_503_with_retry_after_and_logs_one_line(caplog):
    """BentoML's adaptive batching refuses what it cannot serve in time with a generic 503 and a traceback per
    request; clients get a Retry-After and a body that says why, the log one warning line each."""
    import logging

    from bentoml.exceptions import ServiceUnavailable

    from stages.serving.guard import BENTOML_REQUEST_LOGGER, install_log_filter

    async def busy(scope, receive, send):
        await receive()
        body = b'{"error": "An unexpected error has occurred, please check the server log."}'
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json"),
                                                                             (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    sent = _exchange(RequestGuard(busy, max_bytes=100, retry_after_s=10),
                     headers=[("content-type", "application/json")], chunks=[b"{}"])
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
    assert start["status"] == 503 and (b"retry-after", b"10") in start["headers"]
    assert body["error"] == "overloaded" and "retry after 10 s" in body["detail"]
    install_log_filter()
    with caplog.at_level(logging.INFO, logger=BENTOML_REQUEST_LOGGER):
        try:
            raise ServiceUnavailable("process is overloaded")
        except ServiceUnavailable:
            logging.getLogger(BENTOML_REQUEST_LOGGER).error("Exception on %s [%s]", "/classify", "POST", exc_info=True)
    record = caplog.records[-1]
    assert record.levelname == "WARNING" and record.exc_info is None and "Traceback" not in caplog.text
    assert record.getMessage().startswith("Overloaded /classify [POST]: refused with 503")


def test_the_openapi_spec_marks_bodies_with_required_fields_required():
    from stages.serving.guard import openapi_fixed

    spec = {"paths": {
        "/classify": {"post": {"requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "required": ["texts"], "properties": {"texts": {"type": "array"}}}}}},
            "responses": {"200": {"description": "ok"}}}},
        "/lineage": {"post": {"requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "properties": {}}}}}}},
        "/readyz": {"get": {"responses": {"200": {"description": "ok"}}}}}}
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "GET", "path": "/docs.json", "headers": []}
    asyncio.run(RequestGuard(_answering(200, json.dumps(spec).encode()), max_bytes=100)(scope, receive, send))
    fixed = json.loads(sent[1]["body"])
    assert fixed["paths"]["/classify"]["post"]["requestBody"]["required"] is True
    assert "required" not in fixed["paths"]["/lineage"]["post"]["requestBody"]  # nothing required: optional
    assert fixed["paths"]["/readyz"] == spec["paths"]["/readyz"]
    declared = fixed["paths"]["/classify"]["post"]["responses"]["415"]  # the guard's answer is in the spec
    assert declared["content"]["application/json"]["schema"]["required"] == ["error"]
    assert openapi_fixed(json.dumps(spec).encode()) == sent[1]["body"]


def test_an_undeclared_method_or_path_gets_the_apps_405_not_a_media_type_error():
    """Only the POST APIs take a body: a PUT to an API or a probe, or a POST to a probe, is the app's 405
    (schemathesis checks it), whatever the Content-Type."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def ok(request):
        return PlainTextResponse("ok")

    app = RequestGuard(Starlette(routes=[Route("/classify", ok, methods=["POST"]),
                                         Route("/readyz", ok, methods=["GET"])]),
                       max_bytes=100, api_paths=frozenset({"/classify"}))
    for method, path in (("PUT", "/classify"), ("PATCH", "/classify"), ("PUT", "/readyz"), ("POST", "/readyz")):
        status, _ = _call(app, method=method, path=path, headers=[], chunks=[b"{}"])
        assert status == 405, (method, path, status)
    status, body = _call(app, path="/classify", headers=[], chunks=[b"{}"])
    assert status == 415 and "no Content-Type" in json.loads(body)["error"]
    assert _call(app, path="/classify", headers=[JSON], chunks=[b"{}"]) == (200, b"ok")
