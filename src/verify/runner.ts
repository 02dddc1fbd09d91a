import type { CheckResult } from './check-result.js'
import { CHECKS } from './checks/index.js'
import { CheckContext, type RunState } from './context.js'
import { resolveVerifyOptions, type VerifyOptions } from './options.js'

/** The outcome of a run: every check's result and the counts. */
export interface ConformanceReport {
  /** The endpoint, without its query (which may hold a secret). */
  readonly target: string
  readonly results: readonly CheckResult[]
  readonly passed: number
  readonly failed: number
  readonly skipped: number
  /** True when no check failed (skips allowed). */
  readonly ok: boolean
  readonly durationMs: number
}

/**
 * Runs the conformance checks against an endpoint that claims Idempotency-Key support, one
 * after the other, and reports each: pass, fail, or skip with the reason (a check that needs
 * something not given, such as a second credential, is skipped, never passed). It sends real
 * requests that create real operations: point it at staging, never at production.
 *
 * @example
 * ```ts
 * import { runConformance } from 'oncely/verify'
 *
 * const report = await runConformance({
 *   url: 'http://127.0.0.1:3000/v1/charges',
 *   body: '{"amount":1000,"currency":"usd","customer":"cus_42"}',
 *   headers: { authorization: 'Bearer demo_42' },
 *   otherHeaders: { authorization: 'Bearer demo_43' },
 * })
 * if (!report.ok) console.error(report.results.filter((result) => result.outcome === 'fail'))
 * ```
 */
export async function runConformance(options: VerifyOptions): Promise<ConformanceReport> {
  const resolved = resolveVerifyOptions(options)
  const startedAt = performance.now()
  const state: RunState = { conflicts: [] }
  const results: CheckResult[] = []
  let blocked: string | undefined
  for (const check of CHECKS) {
    if (resolved.only !== undefined && !resolved.only.includes(check.id)) continue
    const context = new CheckContext(resolved, check.id, state)
    const began = performance.now()
    const verdict = blocked !== undefined
      ? { outcome: 'skip' as const, reason: blocked, expected: '', seen: '' }
      : await check.run(context).catch((error: unknown) => ({
          outcome: 'fail' as const,
          reason: `the check could not finish: ${error instanceof Error ? error.message : String(error)}`,
          expected: '',
          seen: '',
        }))
    const result: CheckResult = { id: check.id, title: check.title, ...verdict, sent: context.sent, durationMs: Math.round(performance.now() - began) }
    results.push(result)
    resolved.onResult?.(result)
    // Nothing else means anything when the template itself does not run.
    if (check.id === 'replay' && verdict.outcome === 'fail' && verdict.reason.startsWith('the template request answered')) blocked = 'the template request did not succeed (see replay)'
  }
  const count = (outcome: CheckResult['outcome']) => results.filter((result) => result.outcome === outcome).length
  return {
    target: `${resolved.url.origin}${resolved.url.pathname}`,
    results,
    passed: count('pass'),
    failed: count('fail'),
    skipped: count('skip'),
    ok: count('fail') === 0,
    durationMs: Math.round(performance.now() - startedAt),
  }
}
