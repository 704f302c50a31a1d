/** What a handler returns and what it parks: the outcome and interaction JSON of the worker protocol. */

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A question for a person: its answer's value must match `schema` (a JSON Schema). */
export interface Question {
  kind: "question";
  key: string;
  prompt: string;
  schema: Record<string, unknown>;
  target: string;
  /** seconds until the wait expires (the continuation then runs with status `expired`) */
  expires_in?: number | null;
  /** top-level properties of an object value that are erased once the continuation that reads them commits */
  sensitive?: string[];
}

/** A request for permission: answered `{"approved": true}` (status `answered`) or false (`rejected`). */
export interface Permission {
  kind: "permission";
  key: string;
  action: string;
  resources: string[];
  target: string;
  expires_in?: number | null;
}

export type Interaction = Question | Permission;

/** Park the step: wait for the interactions, then run `continuation` (`name@version`) with `snapshot`. */
export interface ParkOutcome {
  type: "park";
  continuation: string;
  snapshot?: unknown;
  interactions: Interaction[];
}

/** Run another step (by its bare name) with `payload`, as a new unit of work. */
export interface NextOutcome {
  type: "next";
  step: string;
  payload?: unknown;
}

/** The run completed with `result`. */
export interface CompleteOutcome {
  type: "complete";
  result?: unknown;
}

/** The run failed with `error` (the workflow's verdict). */
export interface FailOutcome {
  type: "fail";
  error: string;
  details?: unknown;
}

export type Outcome = ParkOutcome | NextOutcome | CompleteOutcome | FailOutcome;

export function park(options: { continuation: string; snapshot?: unknown; interactions: Interaction[] }): ParkOutcome {
  return { type: "park", continuation: options.continuation, snapshot: options.snapshot ?? null, interactions: options.interactions };
}

export function next(step: string, payload?: unknown): NextOutcome {
  return payload === undefined ? { type: "next", step } : { type: "next", step, payload };
}

export function complete(result?: unknown): CompleteOutcome {
  return result === undefined ? { type: "complete" } : { type: "complete", result };
}

export function fail(error: string, details?: unknown): FailOutcome {
  return details === undefined ? { type: "fail", error } : { type: "fail", error, details };
}

export function question(options: Omit<Question, "kind">): Question {
  return { kind: "question", ...options };
}

export function permission(options: Omit<Permission, "kind">): Permission {
  return { kind: "permission", ...options };
}

const OUTCOME_TYPES = new Set(["park", "next", "complete", "fail"]);

/** Whether `value` has the shape of an outcome (the server checks the rest and answers 422). */
export function isOutcome(value: unknown): value is Outcome {
  return typeof value === "object" && value !== null && OUTCOME_TYPES.has((value as { type?: unknown }).type as string);
}
