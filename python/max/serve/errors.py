"""Errors of the OpenAI-compatible API: ``APIError`` carries an HTTP status and OpenAI's error
object (``{"error": {"message", "type", "param", "code"}}``); the handlers turn it, request
validation failures (malformed JSON, wrong field types) and unexpected exceptions into that
JSON, so that every client library reads the message."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("max.serve")

_TYPES = {400: "invalid_request_error", 404: "not_found_error", 408: "invalid_request_error",
          413: "invalid_request_error", 429: "rate_limit_exceeded", 500: "internal_server_error",
          503: "service_unavailable"}


class APIError(Exception):
    """An error answered to the client with `status` and OpenAI's error JSON."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or _TYPES.get(status, "invalid_request_error")


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None,
               type: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type or _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(status: int, message: str, **kw: Any) -> JSONResponse:
    return JSONResponse(error_body(status, message, **kw), status_code=status)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    parts, param = [], None
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if err.get("type") == "json_invalid":
            return f"the request body is not valid JSON: {err.get('msg', '')}", None
        where = ".".join(loc)
        param = param or where or None
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return "invalid request: " + "; ".join(parts), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        response = error_response(exc.status, exc.message, param=exc.param, code=exc.code, type=exc.type)
        if exc.status in (429, 503):  # full or stopping: clients' retry logic reads when to come back
            response.headers["retry-after"] = "1"
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        response = error_response(500, f"internal error: {type(exc).__name__}: {exc}")
        response.headers["connection"] = "close"  # the connection's state is not known: a fresh one
        return response


__all__ = ["APIError", "error_body", "error_response", "install_error_handlers"]
