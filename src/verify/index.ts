/**
 * `oncely/verify`: the conformance kit. Black-box checks of an endpoint that claims
 * Idempotency-Key support (docs/verify.md); the same checks `oncely verify URL` runs.
 */
export { runConformance, type ConformanceReport } from './runner.js'
export { CHECK_IDS, type CheckId, type CheckResult, type CheckOutcome } from './check-result.js'
export type { HeaderList, VerifyOptions } from './options.js'
export { formatTable } from './reporters/table.js'
export { formatJUnit } from './reporters/junit.js'
