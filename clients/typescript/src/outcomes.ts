/** What a handler returns and what it parks: the outcome and interaction JSON of the worker protocol. */

import type { Complete, Fail, Next, Park, Permission as PermissionJSON, Question as QuestionJSON } from "./api-types.js";

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A question for a person: its answer's value must match `schema` (a JSON Schema); `expires_in` in seconds;
 * `sensitive` names top-level properties of an object value, erased once the continuation that reads them commits.
 * Team options (docs/teams.md): `quorum` responses from distinct principals, `assignees` (`assignees_only`),
 * `remind_after` seconds, `escalate` as `[after_seconds, target or names]` pairs; `answers[key].responses` lists each. */
export type Question = QuestionJSON & { kind: "question" };

/** A request for permission: answered `{"approved": true}` (status `answered`) or false (`rejected`). The question's
 * team options, and `reject: "unreachable"` (rejected only once `quorum` approvals can no longer come). */
export type Permission = PermissionJSON & { kind: "permission" };

export type Interaction = Question | Permission;

/** Park the step: wait for the interactions, then run `continuation` (`name@version`) with `snapshot`. */
export type ParkOutcome = Omit<Park, "type" | "interactions"> & { type: "park"; interactions: Interaction[] };

/** Run another step (by its bare name) with `payload`, as a new unit of work. */
export type NextOutcome = Next & { type: "next" };

/** The run completed with `result`. */
export type CompleteOutcome = Complete & { type: "complete" };

/** The run failed with `error` (the workflow's verdict). */
export type FailOutcome = Fail & { type: "fail" };

/** What a handler returns: the OpenAPI's outcome models (`CompleteIn.outcome`), each with its `type`. */
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
