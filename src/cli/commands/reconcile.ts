import { parseArgs } from 'node:util'
import { createEngine, DEFAULT_TTL_MS, parseEncryptionKeys } from '../../index.js'
import { reconcileStuckClaims, type ReconcileReport } from '../../ops/reconciler.js'
import { createPostgresStore, type Queryable } from '../../store/postgres/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'
import { OPS_FLAGS, OPS_HELP, staleAfterFrom, writeJson } from '../ops-output.js'
import { reconcileHookFrom } from '../reconcile-hook-loader.js'

export const command: Command = {
  name: 'reconcile',
  summary: 'settle stuck claims now, printing each decision',
  help: `usage: oncely reconcile [--hook MODULE] [--older-than-ms N] [--json]

Settles the claims nobody settled: each one in_progress and not renewed for --older-than-ms is
taken over (the same compare-and-swap a retry runs, so a retry and the reconciler never both
act), then handed to a hook that looks the outcome up in the outside world and completes it,
fails it, or leaves it suspended with the same identity. Never calls the provider to charge.

Without --hook, the reference service's hook: it looks the charge up at the provider
(GET /v1/charges?order_id=…) and completes the key with the 201 the client would have got.
--hook MODULE loads your own: a module whose default export is the hook
(claim) => Promise<void>, or which exports createReconcileHook({ pool, schema }) returning one.

  --hook MODULE        path of the hook module
  --older-than-ms N    reconcile claims not renewed for this long (default: $RECONCILE_AFTER_MS
                       when not 0, else 2 × the stale threshold); at least the stale threshold.
                       A held claim is reconciled only once its lease is also older than the
                       stale threshold it was made under (recorded with it), so a value smaller
                       than the service's never takes a claim its owner still renews
  --provider-url URL   the reference service's provider (default: $PROVIDER_URL, else http://127.0.0.1:3001)
  --limit N            claims per run (default 100)

With ONCELY_ENCRYPTION_KEYS (id:base64,…, as the service takes it), step results and stored
responses encrypted at rest are decrypted for the hook, and the outcomes it stores encrypted
under the last listed key (or ONCELY_ENCRYPTION_CURRENT).
${OPS_HELP}
${DATABASE_HELP}

exit codes: 0 done (every decision printed), 1 a hook failed or the database failed, 2 bad usage`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: { ...DATABASE_FLAGS, ...OPS_FLAGS, hook: { type: 'string' }, 'older-than-ms': { type: 'string' }, 'provider-url': { type: 'string' }, limit: { type: 'string' } },
      strict: true,
    })
    const staleAfterMs = staleAfterFrom(values)
    const fromEnv = Number(process.env.RECONCILE_AFTER_MS?.trim() || 0)
    const olderThanMs = wholeNumber('older-than-ms', values['older-than-ms'], fromEnv > 0 ? fromEnv : 2 * staleAfterMs)
    if (olderThanMs < staleAfterMs) throw new UsageError(`--older-than-ms (${olderThanMs}) must be at least the stale threshold (${staleAfterMs})`)
    const limit = wholeNumber('limit', values.limit, 100)
    const ttlMs = wholeNumber('IDEMPOTENCY_TTL_MS', process.env.IDEMPOTENCY_TTL_MS?.trim() || undefined, DEFAULT_TTL_MS)
    const { pool, schema } = openDatabase(values)
    try {
      const hook = await reconcileHookFrom(values, pool, schema)
      const keys = process.env.ONCELY_ENCRYPTION_KEYS?.trim() ?? ''
      const encryption = keys === '' ? {} : { encryption: parseEncryptionKeys(keys, process.env.ONCELY_ENCRYPTION_CURRENT?.trim()) }
      const engine = createEngine<Queryable>({ store: createPostgresStore({ pool, schema }), staleAfterMs, ttlMs, ...encryption })
      const reports = await reconcileStuckClaims({ engine, database: { pool, schema }, hook, olderThanMs, limit, log: () => {} })
      if (values.json) writeJson(reports)
      else process.stdout.write(reports.length === 0 ? 'no stuck claims\n' : `${reports.map(reportLine).join('\n')}\n`)
      return reports.some((report) => report.decision === 'error') ? EXIT.failure : EXIT.ok
    } catch (error) {
      if (error instanceof UsageError) throw error
      process.stderr.write(`oncely reconcile: ${(error as Error).message}\n`)
      return EXIT.failure
    } finally {
      await pool.end()
    }
  },
}

function reportLine(report: ReconcileReport): string {
  return `${report.decision.padEnd(10)} user=${report.scope} key=${JSON.stringify(report.key)} claim=${report.claimId}: ${report.detail}`
}

function wholeNumber(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback
  const value = Number(raw)
  if (!Number.isSafeInteger(value) || value <= 0) throw new UsageError(`--${name} must be a positive integer, got ${JSON.stringify(raw)}`)
  return value
}
