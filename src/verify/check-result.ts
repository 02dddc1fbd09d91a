/** What a check is called and what it reports: read by the options, the checks and the reporters alike. */

/** Every check, in the order the kit runs them. */
export const CHECK_IDS = [
  'replay',
  'concurrent-pair',
  'concurrent-burst',
  'payload-mismatch',
  'reordered-json',
  'missing-key',
  'malformed-key',
  'duplicate-key',
  'credentials-isolated',
  'cut-before-response',
  'cut-after-first-byte',
  'server-error-not-stored',
  'retry-after',
  'ttl',
] as const

export type CheckId = (typeof CHECK_IDS)[number]

export type CheckOutcome = 'pass' | 'fail' | 'skip'

/** One check's result: what it sent, what it expected, what it saw. */
export interface CheckResult {
  readonly id: CheckId
  readonly title: string
  readonly outcome: CheckOutcome
  /** Why it failed or was skipped; for a pass, a short note (may be empty). */
  readonly reason: string
  /** One line per request sent (header values other than the kit's own never appear). */
  readonly sent: readonly string[]
  readonly expected: string
  readonly seen: string
  readonly durationMs: number
}
