"""Schemathesis checks of the native API beyond the built-in ones (loaded by .ci/schemathesis)."""

import inspect
import sys

import schemathesis
from hypothesis.internal import lambda_sources

# Hypothesis describes the lambdas of its strategies by parsing their source files with
# `ast`. On CPython 3.11 (seen on 3.11.7) that parse, made deep in a draw, can fail with
# "AST constructor recursion depth mismatch" (a fault in CPython's ast recursion
# tracking): a runner error rather than a finding, and one a higher recursion limit does
# not prevent. The description only names a lambda in Hypothesis's own messages (and lets
# it rewrite simple filters into bounds, which rejection sampling replaces), so the
# runner describes every lambda without reading its source.
sys.setrecursionlimit(20_000)


def _lambda_without_source(f, *_args, **_kwargs):
    params = str(inspect.signature(f))[1:-1]
    return f"lambda {params}: <unknown>" if params else "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_without_source

PROBLEM_JSON = "application/problem+json"


@schemathesis.check
def error_is_problem_json(ctx, response, case):
    """Every error response (4xx and 5xx) is an RFC 9457 problem document with a code."""
    if response.status_code < 400:
        return None
    values = response.headers.get("content-type") or [""]
    content_type = values[0].split(";")[0].strip().lower()
    if content_type != PROBLEM_JSON:
        raise AssertionError(
            f"error {response.status_code} is `{content_type or 'no content type'}`, "
            f"not `{PROBLEM_JSON}`"
        )
    try:
        body = response.json()
    except ValueError as e:
        raise AssertionError(f"error {response.status_code} body is not JSON: {e}") from e
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        raise AssertionError(f"error {response.status_code} problem has no `code`: {body!r}")
    if body.get("status") != response.status_code:
        raise AssertionError(
            f"problem status {body.get('status')!r} differs from the HTTP status "
            f"{response.status_code}"
        )
    return None
