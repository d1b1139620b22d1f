"""Typed errors: one exception class per wovyr error class.

The API's error body is {code, message, field}; its code picks the class
here, so callers branch with ``except wovyr.FloorUnmet`` rather than on
strings. The classes mirror the daemon's (server/openapi.yaml's Error and
Result enums; tests/test_openapi.py fails when they drift).
"""

from typing import Optional


class WovyrError(Exception):
    """Any error from wovyr. ``code`` is its class (e.g. "bad-input"),
    ``status`` the HTTP status (0 when it did not come from a response),
    ``field`` the offending input field, ``retry_after`` seconds to wait
    (429 and 503)."""

    code = "backend-failure"

    def __init__(self, message: str, *, status: int = 0, field: str = "", retry_after: Optional[float] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field
        self.retry_after = retry_after


def _cls(name: str, code: str, doc: str) -> type:
    return type(name, (WovyrError,), {"code": code, "__doc__": doc})


BadInput = _cls("BadInput", "bad-input", "The request is wrong; nothing was started.")
FloorUnmet = _cls("FloorUnmet", "floor-unmet", "No certified, available backend at or above the required strength.")
ResidencyUnmet = _cls("ResidencyUnmet", "residency-unmet",
                      "No region allowed by the tenant's residency policy and the request has a live node.")
PolicyUnenforceable = _cls("PolicyUnenforceable", "policy-unenforceable", "No eligible backend enforces the policy.")
BackendFailure = _cls("BackendFailure", "backend-failure", "The sandbox machinery failed, not the workload.")
Unauthenticated = _cls("Unauthenticated", "unauthenticated", "No or unknown bearer token.")
Forbidden = _cls("Forbidden", "forbidden", "The token may not do this (admin only).")
NotFound = _cls("NotFound", "not-found", "No such invocation or session for this tenant.")
Conflict = _cls("Conflict", "conflict", "The resource's state forbids it (e.g. an ended session).")
TooLarge = _cls("TooLarge", "too-large", "The body exceeds the daemon's cap.")
RateLimited = _cls("RateLimited", "rate-limited", "Over the tenant's rate or quota; see retry_after.")
Unavailable = _cls("Unavailable", "unavailable", "The daemon is not ready or shutting down; see retry_after.")
Timeout = _cls("Timeout", "timeout", "The workload hit its wall-clock limit.")
OOM = _cls("OOM", "oom", "The workload hit its memory limit.")
OutOfFuel = _cls("OutOfFuel", "out-of-fuel", "A wasm workload used up its fuel.")
Killed = _cls("Killed", "killed", "Cancelled by the caller or by shutdown.")
Lost = _cls("Lost", "lost", "The daemon stopped while the invocation ran.")

CLASSES = {c.code: c for c in (BadInput, FloorUnmet, ResidencyUnmet, PolicyUnenforceable, BackendFailure, Unauthenticated, Forbidden,
                               NotFound, Conflict, TooLarge, RateLimited, Unavailable, Timeout, OOM, OutOfFuel, Killed, Lost)}


def error_for(code: str, message: str, **kw) -> WovyrError:
    """The exception of class ``code`` (BackendFailure for an unknown one)."""
    return CLASSES.get(code, BackendFailure)(message, **kw)
