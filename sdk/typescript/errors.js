// Typed errors: one class per wovyr error class.
//
// The API's error body is {code, message, field}; its code picks the class
// here, so callers branch with `instanceof FloorUnmet` rather than on
// strings. The classes mirror the daemon's (server/openapi.yaml's Error and
// Result enums; test/openapi.test.js fails when they drift).

/** Any error from wovyr. */
export class WovyrError extends Error {
  /** @type {string} */
  static code = "backend-failure";

  /**
   * @param {string} message
   * @param {{status?: number, field?: string, retryAfter?: number}} [opts]
   */
  constructor(message, { status = 0, field = "", retryAfter } = {}) {
    super(message);
    this.name = new.target.name;
    /** the error class, e.g. "bad-input" */
    this.code = /** @type {typeof WovyrError} */ (new.target).code;
    /** the HTTP status (0 when it did not come from a response) */
    this.status = status;
    /** the offending input field */
    this.field = field;
    /** seconds to wait before retrying (429 and 503) */
    this.retryAfter = retryAfter;
  }
}

/** @param {string} name @param {string} code */
function errorClass(name, code) {
  // A named class per code: `err instanceof FloorUnmet` and err.name both work.
  const cls = { [name]: class extends WovyrError { static code = code; } }[name];
  return cls;
}

export const BadInput = errorClass("BadInput", "bad-input");
export const FloorUnmet = errorClass("FloorUnmet", "floor-unmet");
export const PolicyUnenforceable = errorClass("PolicyUnenforceable", "policy-unenforceable");
export const ResidencyUnmet = errorClass("ResidencyUnmet", "residency-unmet");
export const BackendFailure = errorClass("BackendFailure", "backend-failure");
export const Unauthenticated = errorClass("Unauthenticated", "unauthenticated");
export const Forbidden = errorClass("Forbidden", "forbidden");
export const NotFound = errorClass("NotFound", "not-found");
export const Conflict = errorClass("Conflict", "conflict");
export const TooLarge = errorClass("TooLarge", "too-large");
export const RateLimited = errorClass("RateLimited", "rate-limited");
export const Unavailable = errorClass("Unavailable", "unavailable");
export const Timeout = errorClass("Timeout", "timeout");
export const OOM = errorClass("OOM", "oom");
export const OutOfFuel = errorClass("OutOfFuel", "out-of-fuel");
export const Killed = errorClass("Killed", "killed");
export const Lost = errorClass("Lost", "lost");

/** Every error class by its code. */
export const CLASSES = Object.freeze(Object.fromEntries(
  [BadInput, FloorUnmet, PolicyUnenforceable, ResidencyUnmet, BackendFailure, Unauthenticated, Forbidden, NotFound, Conflict,
    TooLarge, RateLimited, Unavailable, Timeout, OOM, OutOfFuel, Killed, Lost].map((c) => [c.code, c])));

/**
 * The error of class `code` (BackendFailure for an unknown one).
 * @param {string} code @param {string} message
 * @param {{status?: number, field?: string, retryAfter?: number}} [opts]
 */
export function errorFor(code, message, opts) {
  const Cls = CLASSES[code] ?? BackendFailure;
  return new Cls(message, opts);
}
