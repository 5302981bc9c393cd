"""Every error the API gives is JSON ``{"error": {"field": <dotted field or null>, "message": <one line>}}``
with a 4xx (or 503/504) status: request validation (FastAPI's handler replaced so that the field is
named), HTTP errors (404, 405 ...), openbook's own input errors, and :class:`ApiError`. Anything else is a
bug: logged, and answered with a plain JSON 500, never a traceback."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from openbook.errors import OpenbookError, one_line

log = logging.getLogger("openbook.serve")
MESSAGE_CHARS = 500


class ApiError(Exception):
    """An error answer: ``status``, the ``field`` at fault (or None), a one-line ``message``, ``headers``."""

    def __init__(self, status: int, message: str, field: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers or {}


class ClientGone(Exception):
    """The client disconnected before its answer was ready (answered 499, which nobody reads)."""


def error_body(message: str, field: str | None = None) -> dict:
    return {"error": {"field": field, "message": one_line(message, MESSAGE_CHARS)}}


def error_json(message: str, field: str | None = None) -> str:
    return json.dumps(error_body(message, field), ensure_ascii=False)


def error_response(status: int, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, field), status_code=status, headers=headers)


def as_api_error(error: BaseException) -> ApiError:
    """The answer an exception from an endpoint or the worker gets (a bug: 500, logged)."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, OpenbookError):
        status = getattr(error, "status", 422)
        return ApiError(status, str(error), getattr(error, "field", None))
    log.error("unexpected error", exc_info=error)
    return ApiError(500, "internal server error")


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list", "json-or-python"}


def field_name(loc: tuple) -> str | None:
    """A validation error's location as a dotted field: ``("body", "passages", 0, "text")`` ->
    ``passages.0.text``, without the type tags pydantic adds inside unions (``question.list[str].0``)."""
    parts = [str(p) for p in loc[1:] if not (isinstance(p, str) and ("[" in p or p in _TYPE_TAGS))] if loc else []
    if loc and loc[0] not in ("body", "query", "path", "header"):
        parts = [str(p) for p in loc]
    return ".".join(parts) or None


def _validation_error(errors: list) -> ApiError:
    if not errors:
        return ApiError(422, "invalid request")
    first = errors[0]
    kind, loc = first.get("type", ""), tuple(first.get("loc", ()))
    if kind == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", "")
        return ApiError(400, f"malformed JSON{': ' + str(reason) if reason else ''}")
    field = field_name(loc)
    if field is None and kind in ("missing", "model_attributes_type", "dict_type", "model_type"):
        return ApiError(422, "the request body must be a JSON object")
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        message = "unknown field"
    return ApiError(422, f"{field}: {message}" if field else message, field)


def install_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a JSON error object (module docs)."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, error: ApiError):
        return error_response(error.status, error.message, error.field, error.headers)

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, error: ClientGone):
        return Response(status_code=499)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError):
        api = _validation_error(list(error.errors()))
        return error_response(api.status, api.message, api.field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException):
        message = error.detail if isinstance(error.detail, str) else "request failed"
        return error_response(error.status_code, message, None, getattr(error, "headers", None))

    @app.exception_handler(OpenbookError)
    async def _openbook(request: Request, error: OpenbookError):
        api = as_api_error(error)
        return error_response(api.status, api.message, api.field)

    @app.exception_handler(Exception)
    async def _bug(request: Request, error: Exception):
        api = as_api_error(error)
        return error_response(api.status, api.message, api.field)
