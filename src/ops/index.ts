/**
 * `oncely/ops`: the operator's tools, apart from the request path so an application that only
 * guards requests loads none of them: the sweeper (retention), key listing, stats and release,
 * the reconciler and its loop, the operator console and OpenTelemetry tracing of an engine. Most
 * take a `pg`-shaped pool of the database the keys live in.
 */
export { sweepExpiredKeys } from './sweeper.js'
export type { SweepOptions, SweepableStore } from './sweeper.js'
export type { AdminDatabase } from './admin-database.js'
export { inspectKey, listKeys } from './keys.js'
export type { KeyDetails, KeySummary, ListKeysOptions, StepRecord } from './keys.js'
export { keyStats } from './key-stats.js'
export type { KeyStats } from './key-stats.js'
export { releaseKey } from './release-key.js'
export type { EvictableCache, ReleaseKeyOptions, ReleaseRefusal, ReleaseResult } from './release-key.js'
export { OUTCOME_UNKNOWN_RESPONSE, reconcileStuckClaims } from './reconciler.js'
export type { ReconcileClaim, ReconcileHook, ReconcileOptions, ReconcileReport } from './reconciler.js'
export { startReconciler } from './reconciler-loop.js'
export type { ReconcilerLoop } from './reconciler-loop.js'
export { RECONCILE_DECISIONS, REQUEST_OUTCOMES } from './reconcile-decisions.js'
export type { ReconcileDecisionName, RequestOutcome } from './reconcile-decisions.js'
export { createConsole } from './console/console-handler.js'
export type { ConsoleOptions, OperatorConsole } from './console/console-handler.js'
export type { ConsolePeer } from './console/console-access.js'
export { serveConsole } from './console/serve-console.js'
export type { ServeConsoleOptions, ServedConsole } from './console/serve-console.js'
export { instrumentEngine } from './telemetry.js'
export type { SpanLike, TracerLike } from './telemetry.js'
