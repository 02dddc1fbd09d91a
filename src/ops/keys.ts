import { DEFAULT_STALE_AFTER_MS } from '../engine/options.js'
import { positiveInteger } from '../option-validation.js'
import { deriveStepKey } from '../engine/steps.js'
import { openSteps, openResponse } from '../engine/encrypted-store.js'
import { isSealedBytes, isSealedText, resolveKeyring, sealedKeyId, type EncryptionOptions, type Keyring } from '../engine/encryption-keys.js'
import type { KeyDetailRow, KeyRow } from '../store/postgres/statements-ops.js'
import { resolveAdminDatabase, toNumber, type AdminDatabase } from './admin-database.js'

/**
 * A key as operators see it. `state` says what to do about it:
 * `running` (an owner holds a fresh lease), `stuck` (its owner stopped renewing past the stale
 * threshold), `suspended` (given up with its steps kept; the next retry resumes it),
 * `completed`, `failed` (a stored outcome, replayed to retries).
 */
export interface KeySummary {
  scope: string
  key: string
  state: 'running' | 'stuck' | 'suspended' | 'completed' | 'failed'
  status: 'in_progress' | 'completed' | 'failed'
  /** The claim's identity: part of every provider key it derives. */
  claimId: string
  fingerprint: string
  recoveryPoint: string | null
  /** Milliseconds since the owner last renewed its lease; null for a settled key. */
  leaseAgeMs: number | null
  /** Milliseconds since the claim was made. */
  ageMs: number
  createdAt: string
  lockedAt: string | null
  expiresAt: string
  /** Past its TTL: the next request with this key is a new operation. */
  expired: boolean
  responseStatus: number | null
  /** Taken over or suspended at some time: an earlier owner may have acted on it. */
  interrupted: boolean
  /** Why an owner could not store the outcome (a deterministic failure): fix it, then let a retry resume. */
  outcomeError: string | null
}

/** One committed step of a claim: its name, stored result and the key it passed on. */
export interface StepRecord {
  name: string
  result: unknown
  /** The key the step passed to the outside world (`deriveStepKey`): look it up there. */
  providerKey: string
}

/** A stored value encrypted at rest (the engine's `encryption`), and whether it was decrypted. */
export interface SealedField {
  /** `response`, or `step:<name>`. */
  field: string
  keyId: string
  opened: boolean
  /** Why it was not: no keys given, the key id unknown, or it does not decrypt. */
  reason?: string
}

/** `KeySummary` and everything stored with the key. */
export interface KeyDetails extends KeySummary {
  steps: StepRecord[]
  /**
   * Every encrypted value of the row. One not opened keeps its stored form: a step's result is
   * the sealed string, the response's headers are empty and its body the envelope in base64.
   */
  encrypted: SealedField[]
  /** The stored response; the body as UTF-8 text when it is, else base64. */
  response: { status: number; headers: Array<[string, string]>; body: string; bodyEncoding: 'utf8' | 'base64' } | null
}

export interface ListKeysOptions {
  /** Only this user's keys. (Default: every user) */
  scope?: string
  /** Only claims that are stuck or suspended. (Default: false) */
  stuck?: boolean
  /** The engine's stale threshold, to tell a running claim from a stuck one. (Default: 90000) */
  staleAfterMs?: number
  /** At most this many keys, stuck ones first. (Default: 100) */
  limit?: number
}

/**
 * Lists keys, stuck and suspended claims first (oldest lease first), then the newest.
 *
 * @example
 * ```ts
 * import { listKeys } from 'oncely/ops'
 * const stuck = await listKeys({ pool }, { stuck: true, staleAfterMs: 30_000 })
 * for (const key of stuck) console.log(key.scope, key.key, key.state, key.leaseAgeMs)
 * ```
 */
export async function listKeys(target: AdminDatabase, options: ListKeysOptions = {}): Promise<KeySummary[]> {
  const { db, sql } = resolveAdminDatabase(target)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const limit = positiveInteger('limit', options.limit ?? 100)
  const { rows } = await db.query<KeyRow>({ text: sql.listKeys, values: [staleAfterMs, options.scope ?? null, options.stuck === true, limit] })
  return rows.map(summaryOf)
}

/**
 * Reads one key with its steps (and the provider key each passed on) and its stored response.
 * Resolves to `undefined` when the user has no such key.
 *
 * @example
 * ```ts
 * import { inspectKey } from 'oncely/ops'
 * const key = await inspectKey({ pool }, { scope: '42', key: 'order-42' })
 * if (key?.state === 'stuck') console.log(key.steps.map((step) => step.providerKey))
 * ```
 */
export async function inspectKey(target: AdminDatabase, options: { scope: string; key: string; staleAfterMs?: number; encryption?: EncryptionOptions }): Promise<KeyDetails | undefined> {
  const ring = options.encryption === undefined ? undefined : resolveKeyring(options.encryption)
  const row = await readKeyRow(target, options)
  return row === undefined ? undefined : detailsOf(row, ring)
}

/** The row behind `inspectKey`, with the fence token `releaseKey` compares. */
export async function readKeyRow(target: AdminDatabase, options: { scope: string; key: string; staleAfterMs?: number }): Promise<KeyDetailRow | undefined> {
  const { db, sql } = resolveAdminDatabase(target)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const { rows } = await db.query<KeyDetailRow>({ text: sql.inspectKey, values: [staleAfterMs, String(options.scope), String(options.key)] })
  return rows[0]
}

export function summaryOf(row: KeyRow): KeySummary {
  return {
    scope: row.scope,
    key: row.key,
    state: stateOf(row),
    status: row.status,
    claimId: row.claim_id,
    fingerprint: row.fingerprint,
    recoveryPoint: row.recovery_point,
    leaseAgeMs: toNumber(row.lease_age_ms),
    ageMs: Number(row.age_ms),
    createdAt: row.created_at,
    lockedAt: row.locked_at,
    expiresAt: row.expires_at,
    expired: row.expired,
    responseStatus: row.response_status,
    interrupted: row.interrupted,
    outcomeError: row.outcome_error,
  }
}

export function detailsOf(row: KeyDetailRow, ring?: Keyring): KeyDetails {
  const encrypted: SealedField[] = []
  // Issue 23: each sealed value opened on its own, so one that does not open hides nothing else.
  const open = <T>(field: string, sealed: Uint8Array | string, opener: () => T, fallback: T): T => {
    try {
      const value = opener()
      encrypted.push({ field, keyId: sealedKeyId(sealed), opened: true })
      return value
    } catch (error) {
      encrypted.push({ field, keyId: sealedKeyId(sealed), opened: false, reason: (error as Error).message })
      return fallback
    }
  }
  const where = { scope: row.scope, key: row.key }
  const steps = Object.entries(row.step_results ?? {}).map(([name, stored]) => ({
    name,
    result: isSealedText(stored) ? open(`step:${name}`, stored, () => openSteps(ring, where, { [name]: stored })[name], stored as unknown) : stored,
    providerKey: deriveStepKey({ scope: row.scope, key: row.key, claimId: row.claim_id, step: name }),
  }))
  let response: KeyDetails['response'] = null
  if (row.response_status !== null && row.response_body !== null) {
    const stored = { status: row.response_status, headers: row.response_headers ?? [], body: row.response_body }
    const opened = isSealedBytes(stored.body) ? open('response', stored.body, () => openResponse(ring, where, stored), undefined) : stored
    const bytes = Buffer.from(opened?.body ?? stored.body)
    let body: string
    let bodyEncoding: 'utf8' | 'base64' = 'utf8'
    try {
      if (opened === undefined) throw new Error('still encrypted')
      body = new TextDecoder('utf-8', { fatal: true }).decode(bytes)
    } catch {
      body = bytes.toString('base64')
      bodyEncoding = 'base64'
    }
    response = { status: stored.status, headers: (opened?.headers ?? []).map(([name, value]) => [name, value]), body, bodyEncoding }
  }
  return { ...summaryOf(row), steps, encrypted, response }
}

function stateOf(row: KeyRow): KeySummary['state'] {
  if (row.status !== 'in_progress') return row.status
  if (!row.held) return 'suspended'
  return row.stuck ? 'stuck' : 'running'
}
