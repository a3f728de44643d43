"""Schemathesis checks of the native API beyond the built-in ones (loaded by .ci/schemathesis)."""

import sys

import schemathesis

# Hypothesis describes recursive strategies (the request bodies' nested JSON) by parsing
# lambda sources with `ast`; near CPython 3.11's default recursion limit of 1,000 that
# parse fails with "AST constructor recursion depth mismatch", a runner error rather than
# a finding. A higher limit leaves room for it.
sys.setrecursionlimit(20_000)

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
