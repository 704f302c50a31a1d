export * from "./api-types.js";
export { Parkway } from "./client.js";
export type { InteractionFilter, ParkedRun, ParkwayOptions, RunFilter, StartParked, StartRun } from "./client.js";
export { Context, PossiblyRan, SystemFault, ToolFailed } from "./context.js";
export type { ToolCall } from "./context.js";
export { Conflict, Forbidden, Gone, Invalid, NotFound, ParkwayError, Unauthorized, Unavailable } from "./errors.js";
export type { ErrorBody } from "./errors.js";
export type { Handler, Serves } from "./handlers.js";
export { complete, fail, isOutcome, next, park, permission, question } from "./outcomes.js";
export type {
  CompleteOutcome,
  FailOutcome,
  Interaction,
  Json,
  NextOutcome,
  Outcome,
  ParkOutcome,
  Permission,
  Question,
} from "./outcomes.js";
export type { Answer, Answers, Item, LeaseRequest, NextLease, Receipt, ToolIntent, ToolState } from "./protocol.js";
export { nodeListener, pushHandler } from "./push.js";
export type { FetchHandler, PushOptions } from "./push.js";
export { sign, verify, WebhookVerificationError } from "./signature.js";
export type { SignedHeaders } from "./signature.js";
export type { StreamedEvent, StreamOptions } from "./sse.js";
export { worker } from "./worker.js";
export type { Worker, WorkerOptions } from "./worker.js";
