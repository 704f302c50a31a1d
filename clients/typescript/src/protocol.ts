/** The worker protocol's items, receipts and tool states (POST /v1/worker/...). */

/** One answer as a continuation sees it. */
export interface Answer {
  status: "pending" | "answered" | "rejected" | "canceled" | "expired" | "interrupted";
  /** null unless answered; sensitive fields are decrypted here only */
  value: unknown;
  /** true only for an approved permission */
  approved: boolean;
  answered_by: string | null;
}

export type Answers = Record<string, Answer>;

/** A unit of work handed out under a lease: a step to start or a continuation to resume. */
export interface Item {
  lease_id: string;
  kind: "start" | "resume";
  run_id: string;
  step_id: string;
  attempt: number;
  /** the step's or the continuation's bare name */
  name: string;
  /** the continuation's version; null for a start */
  version: number | null;
  /** what `serves` names: the bare step name, or `name@version` */
  key: string;
  payload?: unknown;
  snapshot?: unknown;
  answers?: Answers;
  lease_expires_at: string;
}

export interface LeaseRequest {
  /** a stable name of this process (it shows in GET /v1/workers) */
  worker: string;
  /** bare step names and `name@version` continuation keys */
  serves: string[];
  /** 1..100 */
  max?: number;
  /** 0..30: how long the call waits for work */
  wait_s?: number;
  /** 5..600 */
  lease_s?: number;
}

export interface Receipt {
  lease_id: string;
  run_id: string;
  step_id: string;
  outcome: "park" | "next" | "complete" | "fail";
  run_status: string;
  committed_at: string;
}

export interface ToolIntent {
  name: string;
  key: string;
  args?: unknown;
  replay: "safe" | "never";
}

/** `run`: the intent is durable, run the effect now; `settled`: it already ran (or possibly ran): do not. */
export type ToolState =
  | { state: "run" }
  | { state: "settled"; result?: unknown; error?: string | null; possibly_ran: boolean };
