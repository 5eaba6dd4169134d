"""Schemathesis hooks of tests/openapi_fuzz.rs (loaded through SCHEMATHESIS_HOOKS).

- `before_call`: when CLOUDLY_FUZZ_IDENTITY names a file (the bootstrap administrator identity
  `cloudly serve` wrote), every envelope generated to fit the document (positive mode) whose
  `request.identity` is an object carries that identity instead, so it gets past
  `identity-refused` and reaches the request readers and the domain. Envelopes generated to break
  the document (negative mode) keep what was generated.
- `no_internal_error`: an answered envelope is HTTP 200 whatever it says, so a server fault shows
  as its `error.data.code`: `internal-error` or `store-unavailable` fail the run like a 5xx.
- `negative_data_refused`: this API's `negative_data_rejection`. A refusal is an HTTP 200 envelope
  with `error`, so an envelope that breaks the document must be answered either a non-200 status
  or an envelope with `error`, never a `response`.
"""

import json
import os

import schemathesis

_IDENTITY_FILE = os.environ.get("CLOUDLY_FUZZ_IDENTITY")
_IDENTITY = None
if _IDENTITY_FILE:
    with open(_IDENTITY_FILE, encoding="utf-8") as handle:
        _IDENTITY = json.load(handle)

SERVER_FAULTS = ("internal-error", "store-unavailable")


@schemathesis.hook
def before_call(context, case, kwargs):
    if _IDENTITY is None or _is_negative(case):
        return
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("request"), dict):
        if isinstance(body["request"].get("identity"), dict):
            body["request"]["identity"] = _IDENTITY


def _is_negative(case):
    return case.meta is not None and case.meta.generation.mode.is_negative


def _answer(response):
    try:
        answer = json.loads(response.content)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


@schemathesis.check
def no_internal_error(ctx, response, case):
    """An answered envelope never reports a server fault."""
    answer = _answer(response)
    if answer is None:
        return None
    error = answer.get("error")
    if isinstance(error, dict) and isinstance(error.get("data"), dict):
        code = error["data"].get("code")
        if code in SERVER_FAULTS:
            raise AssertionError(f"the envelope answers the server fault {code}")
    return None


@schemathesis.check
def negative_data_refused(ctx, response, case):
    """An envelope that breaks the document is refused (non-200, or an envelope with `error`)."""
    if not _is_negative(case) or not case.path.endswith("/typedrequest") or response.status_code != 200:
        return None
    answer = _answer(response)
    if answer is None or answer.get("error") is None:
        raise AssertionError("an envelope that breaks the document was answered with a response")
    return None
