/** The worker protocol's items, receipts and tool states (POST /v1/worker/...), as the OpenAPI has them. */

import type { AnswerOut, ItemOut, LeaseAsk, LeaseIn, ReceiptOut, ToolIntentIn, ToolStateOut } from "./api-types.js";

/** One answer as a continuation sees it: `status`, `value` (sensitive fields decrypted here only),
 * `approved` (true only for an approved permission), `answered_by`. */
export type Answer = AnswerOut;
export type Answers = Record<string, Answer>;

/** A unit of work handed out under a lease: a step to `start` (with `payload`) or a continuation to `resume`
 * (with `snapshot` and `answers`); `key` is what `serves` names. */
export type Item = ItemOut;

/** `serves`: bare step names and `name@version` continuation keys; `max` 1..100, `wait_s` 0..30, `lease_s` 5..600. */
export type LeaseRequest = Omit<LeaseIn, "serves"> & { serves: string[] };

/** A completion's `lease`: the next items, as a lease call without the long poll (`max` 0..100). */
export type NextLease = Omit<LeaseAsk, "serves"> & { serves: string[] };

/** What a completion committed; `items`: the next items its `lease` took. */
export type Receipt = ReceiptOut;
export type ToolIntent = ToolIntentIn;

/** `run`: the intent is durable, run the effect now; `settled`: it already ran (or possibly ran): do not. */
export type ToolState = ToolStateOut;
