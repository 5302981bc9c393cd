"""Fuzz the /v1 API from its own OpenAPI description with schemathesis (valid and invalid requests, a
bounded number of examples per operation, in process through ASGI): no request ever gets a 5xx, and every
error is the JSON error object naming the field."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402  (schemathesis brings hypothesis)

from serve_helpers import ADMIN, config, create_app, tiny_rag  # noqa: E402

MAX_EXAMPLES = 30


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    rag, encoder = tiny_rag(root)
    app = create_app(config(root, encoder, max_question_chars=200, timeout_s=30.0), rag=rag)
    return schemathesis.openapi.from_asgi("/openapi.json", app).include(path_regex="^/v1/")


def _operations(schema) -> list:
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_the_api_never_answers_5xx(api_schema, mode):
    operations = _operations(api_schema)
    assert {op.path for op in operations} >= {"/v1/ask", "/v1/retrieve", "/v1/kb", "/v1/kb/passages", "/v1/kb/swap"}
    generation_mode = schemathesis.GenerationMode(mode)
    for operation in operations:
        if mode == "negative" and operation.method.upper() == "GET":
            continue  # GET /v1/kb takes no input: nothing can be wrong with it

        @given(case=operation.as_strategy(generation_mode=generation_mode))
        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def check(case):
            response = case.call(headers=ADMIN)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text)
            if response.status_code >= 400:
                error = response.json()["error"]
                assert set(error) == {"field", "message"} and "\n" not in error["message"], response.text

        check()
