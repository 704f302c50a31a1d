/** The API's errors as exceptions: every non-2xx answer becomes a `ParkwayError` of the status's class. */

/** The body of every API error: a stable code, a sentence, and (for 409/410) the authoritative state. */
export interface ErrorBody {
  error: string;
  detail: string;
  state?: unknown;
  [field: string]: unknown;
}

/** Raised when the API answers with an error status; `status`, `code`, `detail` and `state` are the API's. */
export class ParkwayError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly state: unknown;
  readonly body: ErrorBody;

  constructor(status: number, body: ErrorBody) {
    super(`${status} ${body.error}: ${body.detail}`);
    this.name = new.target.name;
    this.status = status;
    this.code = body.error;
    this.detail = body.detail;
    this.state = body.state;
    this.body = body;
  }
}

/** Raised on 401: no token, a bad one, or one of a disabled principal. */
export class Unauthorized extends ParkwayError {}
/** Raised on 403: the caller may not do this (no live grant, or the wrong kind of principal). */
export class Forbidden extends ParkwayError {}
/** Raised on 404: it never existed, or the caller may not learn that it does. */
export class NotFound extends ParkwayError {}
/** Raised on 409: another response or another worker won; `state` is what is true now. */
export class Conflict extends ParkwayError {}
/** Raised on 410: the wait or the run ended; `state` says how. */
export class Gone extends ParkwayError {}
/** Raised on 422: the request was refused as invalid and nothing was stored. */
export class Invalid extends ParkwayError {}

/** Raised on 503 (the database is unavailable): retry after `retryAfterS` seconds. */
export class Unavailable extends ParkwayError {
  readonly retryAfterS: number | null;

  constructor(status: number, body: ErrorBody, retryAfterS: number | null) {
    super(status, body);
    this.retryAfterS = retryAfterS;
  }
}

const BY_STATUS: Record<number, new (status: number, body: ErrorBody) => ParkwayError> = {
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  410: Gone,
  422: Invalid,
};

/** The exception for an error response, from its status, its JSON body (or text) and its headers. */
export function errorFor(status: number, text: string, headers: Headers): ParkwayError {
  const body = parseBody(status, text);
  if (status === 503) {
    const retryAfter = Number(headers.get("retry-after"));
    return new Unavailable(status, body, Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter : null);
  }
  const Kind = BY_STATUS[status] ?? ParkwayError;
  return new Kind(status, body);
}

function parseBody(status: number, text: string): ErrorBody {
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed && typeof parsed === "object" && "error" in parsed) {
      const body = parsed as ErrorBody;
      return { ...body, detail: typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail) };
    }
  } catch {
    // not JSON: a proxy's page, an empty body
  }
  return { error: `http_${status}`, detail: text.slice(0, 500) || `HTTP ${status}` };
}
