import { UsageError } from './command.js'

/** The stale-threshold flag every operations command takes. */
export const OPS_FLAGS = {
  'stale-after-ms': { type: 'string' },
  json: { type: 'boolean' },
} as const

export const OPS_HELP = `  --stale-after-ms N   the engine's stale threshold (default: $IDEMPOTENCY_STALE_AFTER_MS, else 90000)
  --json               print JSON`

export function staleAfterFrom(values: { 'stale-after-ms'?: string | undefined }): number {
  const raw = values['stale-after-ms'] ?? (process.env.IDEMPOTENCY_STALE_AFTER_MS?.trim() || undefined)
  if (raw === undefined) return 90_000
  const value = Number(raw)
  if (!Number.isSafeInteger(value) || value <= 0) throw new UsageError(`--stale-after-ms must be a positive integer, got ${JSON.stringify(raw)}`)
  return value
}

export function writeJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`)
}

/** `1.2s`, `3m04s`, `2h05m`: ages at a glance. */
export function formatAge(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`
  const seconds = Math.floor(ms / 1000)
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${String(seconds % 60).padStart(2, '0')}s`
  return `${Math.floor(seconds / 3600)}h${String(Math.floor((seconds % 3600) / 60)).padStart(2, '0')}m`
}
