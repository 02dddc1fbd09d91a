/**
 * The claims, step writes and completions the store sends on its pool, batched when they arrive
 * together (issue 21, `natural-batch.ts`): a lone one is its own statement; several share one
 * statement, one round trip and one commit, each decided as it would be alone. Completions that
 * carry the caller's writes are flights; several share one transaction.
 */
import type { ClaimRequest, Fence, FinalOutcome } from '../../engine/store.js'
import type { WriteStatement } from '../../engine/types.js'
import type { PoolLike, QueryConfig } from './executor.js'
import { eachAlone, NaturalBatch, type Settled } from '../../natural-batch.js'
import { isTransientPgError, SQLSTATE, sqlState } from './pg-errors.js'
import { bind, flight, send } from './statement-runner.js'
import { orderingKeyOf } from './ordering-keys.js'
import { LOCK_ORDERING_KEYS } from './statements-outbox.js'
import type { ClaimBatchInput, ClaimBatchRow, ClaimRow, CompletionBatchInput, Statement, Statements, StepBatchInput } from './statements.js'

export interface BatchedWritesOptions {
  pool: PoolLike
  sql: Statements
  timeoutMs: number
  lockTimeoutMs: number
  /** The key channel a completion wakes waiters on. */
  channel: string
  /** The most claims, and completions, one statement carries; the most flights one transaction carries. */
  maxBatchSize: number
  /** BEGIN and the SET LOCALs that open a flight's transaction. */
  begin: readonly string[]
}

/** What a claim statement answered for one claim, and when it was sent. */
export interface ClaimAnswer {
  row: ClaimRow | undefined
  sentAt: number
}

/**
 * A completion's body travels in the batch's JSON, as base64: past this size it is sent alone,
 * as bytes, so one large response never makes a batch's parameter large.
 */
export const MAX_BATCHED_BODY_BYTES = 16 * 1024

/**
 * Runs `batch` for several inputs. A lost connection, a timeout, a server shutting down fail every
 * input of the batch, as each would have failed alone, and the engine retries each. An error of
 * the statement's own (a value PostgreSQL refuses in one input) must not fail the others: each
 * runs once more alone and gets its own answer.
 */
async function orEachAlone<In, Out>(inputs: In[], batch: () => Promise<Array<Settled<Out>>>, alone: (input: In) => Promise<Out>): Promise<Array<Settled<Out>>> {
  try {
    return await batch()
  } catch (error) {
    if (sqlState(error) === undefined || isTransientPgError(error)) throw error
    return eachAlone(inputs, alone)
  }
}

/**
 * True when `error` proves its transaction rolled back: PostgreSQL refused a statement or the
 * COMMIT (it has a SQLSTATE) and the connection is still there. A lost connection (no SQLSTATE,
 * class 08, a backend terminated or shut down) may come after the COMMIT landed: only reading
 * the rows back can tell.
 */
function rolledBack(error: unknown): boolean {
  const code = sqlState(error)
  return code !== undefined && !code.startsWith('08') && code !== SQLSTATE.adminShutdown && code !== SQLSTATE.crashShutdown
}

/** True once `completing` (a flight whose completion fails in the database on a lost fence, ON001) landed; false on that failure. */
export async function fenceHeld(completing: Promise<unknown>): Promise<boolean> {
  try {
    await completing
    return true
  } catch (error) {
    if (sqlState(error) === SQLSTATE.fenceLost) return false
    throw error
  }
}

export function batchedWrites(options: BatchedWritesOptions) {
  const { pool, sql, timeoutMs, lockTimeoutMs, channel, maxBatchSize, begin } = options
  const sendOn = <R>(statement: Statement, values: unknown[], what: string, onLate?: (late: { rows: R[] }) => void) =>
    send<R>(pool, bind(statement, values, timeoutMs), timeoutMs, what, onLate)

  const claimAlone = async (request: ClaimRequest): Promise<ClaimAnswer> => {
    const sentAt = performance.now()
    const { rows } = await sendOn<ClaimRow>(sql.claim, claimValues(request, lockTimeoutMs), 'the claim', (late) => {
      if (late.rows[0]?.outcome === 'claimed') request.onLateInsert?.()
    })
    return { row: rows[0], sentAt }
  }
  const claims = new NaturalBatch<ClaimRequest, ClaimAnswer>(maxBatchSize, async (requests) => {
    if (requests.length === 1) return eachAlone(requests, claimAlone)
    return orEachAlone(
      requests,
      async () => {
        const sentAt = performance.now()
        const input = JSON.stringify(requests.map(claimInput))
        const { rows } = await sendOn<ClaimBatchRow>(sql.claimBatch, [input, lockTimeoutMs], 'the claim', (late) => {
          for (const row of late.rows) if (row.outcome === 'claimed') requests[row.n]?.onLateInsert?.()
        })
        const answers: Array<Settled<ClaimAnswer>> = requests.map(() => ({ ok: true, value: { row: undefined, sentAt } }))
        for (const row of rows) answers[row.n] = { ok: true, value: { row, sentAt } }
        return answers
      },
      claimAlone,
    )
  })

  type Completion = { fence: Fence; outcome: FinalOutcome }
  const completeAlone = async ({ fence, outcome }: Completion): Promise<boolean> => {
    const result = await sendOn(sql.complete, [fence.scope, fence.key, fence.fenceToken, ...completionValues(outcome), channel], sql.complete.name ?? 'a statement')
    return (result.rowCount ?? 0) === 1
  }
  const completions = new NaturalBatch<Completion, boolean>(maxBatchSize, async (batch) => {
    if (batch.length === 1) return eachAlone(batch, completeAlone)
    return orEachAlone(
      batch,
      async () => {
        const input = JSON.stringify(batch.map(completionInput))
        const { rows } = await sendOn<{ n: number }>(sql.completeBatch, [input, channel], 'the completion')
        return matchedByRow(batch.length, rows)
      },
      completeAlone,
    )
  })

  // A step's write: its values after the fence, as the single statement binds them, and as the
  // batch's input carries them.
  type StepWrite = { fence: Fence; values: unknown[]; input: Omit<StepBatchInput, 'n' | 'scope' | 'key' | 'fence_token'> }
  const stepWrites = (alone: Statement, batched: Statement, what: string) => {
    const writeAlone = async ({ fence, values }: StepWrite): Promise<boolean> => {
      const result = await sendOn(alone, [fence.scope, fence.key, fence.fenceToken, ...values], alone.name ?? what)
      return (result.rowCount ?? 0) === 1
    }
    const writeBatch = (writes: StepWrite[]): Promise<Array<Settled<boolean>>> =>
      writes.length === 1
        ? eachAlone(writes, writeAlone)
        : orEachAlone(
            writes,
            async () => {
              const input = JSON.stringify(writes.map(({ fence, input }, n): StepBatchInput => ({ n, scope: fence.scope, key: fence.key, fence_token: fence.fenceToken, ...input })))
              const { rows } = await sendOn<{ n: number }>(batched, [input], what)
              return matchedByRow(writes.length, rows)
            },
            writeAlone,
          )
    const batch = new NaturalBatch<StepWrite, boolean>(maxBatchSize, async (writes) => {
      // One UPDATE … FROM applies only one of two inputs that match one row: an execution's
      // parallel steps write their row one after another, the first with the batch.
      const rows = new Set<string>()
      const first: number[] = []
      const later: number[] = []
      writes.forEach(({ fence }, index) => {
        const row = `${fence.scope}\u0000${fence.key}`
        ;(rows.has(row) ? later : first).push(index)
        rows.add(row)
      })
      const answers = new Array<Settled<boolean>>(writes.length)
      const batched = await writeBatch(first.map((index) => writes[index] as StepWrite))
      first.forEach((index, n) => (answers[index] = batched[n] as Settled<boolean>))
      for (const index of later) [answers[index]] = (await eachAlone([writes[index] as StepWrite], writeAlone)) as [Settled<boolean>]
      return answers
    })
    return (write: StepWrite): Promise<boolean> => (stepBytes(write) > MAX_BATCHED_BODY_BYTES ? writeAlone(write) : batch.submit(write))
  }
  // A completion with the caller's writes is a flight: BEGIN, the fenced completion (which fails
  // with ON001 on a lost fence), the writes and COMMIT, sent at once. The flights that arrive while
  // one is in flight leave together as one transaction (issue 21): one round trip, one commit and
  // one BEGIN for all of them, where each alone cost the database a transaction, and, when they
  // write the same ordering key's events, one wait for its lock instead of one each. Each still
  // commits with its own writes or not at all (Invariant 8). When PostgreSQL refuses any of them
  // (a lost fence, a write it rejects, a lock or statement timeout, a deadlock), the whole
  // transaction rolled back and each flight is sent again alone, to be decided as it would have
  // been alone. A lost connection fails every flight of the transaction with it: they committed
  // together or not at all, and each engine reads its own key back.
  const flightAlone = (statements: readonly WriteStatement[]) => fenceHeld(flight(pool, begin, timeoutMs, statements))
  const flights = new NaturalBatch<readonly WriteStatement[], boolean>(maxBatchSize, async (batch) => {
    if (batch.length === 1) return eachAlone(batch, flightAlone)
    try {
      await flight(pool, begin, timeoutMs, [...orderingLocksFirst(batch), ...batch.flat()])
    } catch (error) {
      if (!rolledBack(error)) throw error
      return eachAlone(batch, flightAlone)
    }
    return batch.map((): Settled<boolean> => ({ ok: true, value: true }))
  })

  const commitStep = stepWrites(sql.commitStep, sql.commitStepBatch, 'the step')
  const markStepStarted = stepWrites(sql.markStepStarted, sql.markStepStartedBatch, 'the step mark')

  return {
    /** A fenced step commit on the pool (`commitStep`'s values): true when the caller's token still held the claim. */
    commitStep: (fence: Fence, step: string, resultJson: string, carriedJson: string): Promise<boolean> =>
      commitStep({ fence, values: [step, resultJson, carriedJson], input: { step, carried: carriedJson, result: resultJson } }),
    /** A fenced at-most-once step mark on the pool (`markStepStarted`'s values): true when the caller's token still held the claim. */
    markStepStarted: (fence: Fence, step: string, carriedJson: string, recoveryPoint: string | null): Promise<boolean> =>
      markStepStarted({ fence, values: [step, carriedJson, recoveryPoint], input: { step, carried: carriedJson, recovery_point: recoveryPoint } }),
    /** One claim round: the key's row as the claim statement answers it, batched with the claims that arrived meanwhile. */
    claim: (request: ClaimRequest): Promise<ClaimAnswer> => claims.submit(request),
    /**
     * A flight whose first statement is the fenced completion (`completeInFlight`) and the rest
     * the caller's writes, batched with the flights that arrive meanwhile (sent alone when its
     * response's body is over 16 KiB, so that one large answer never makes a shared transaction
     * large): true once it committed, false when the caller's token no longer held the claim
     * (nothing of it committed).
     */
    completeInFlight: (statements: readonly WriteStatement[], outcome: FinalOutcome): Promise<boolean> =>
      outcome.response.body.byteLength > MAX_BATCHED_BODY_BYTES ? flightAlone(statements) : flights.submit(statements),
    /** A fenced completion on the pool: true when the caller's token still held the claim. */
    complete: (fence: Fence, outcome: FinalOutcome): Promise<boolean> =>
      outcome.response.body.byteLength > MAX_BATCHED_BODY_BYTES ? completeAlone({ fence, outcome }) : completions.submit({ fence, outcome }),
  }
}

/**
 * The statement that takes, in one order, the ordering locks of the outbox events the flights
 * write, when they hold events of more than one key: taken each at its event, in the order the
 * flights came, two processes' shared transactions could each hold one key another waits for
 * (the reference service's charges of two customers, in opposite orders), a deadlock PostgreSQL
 * breaks only after its `deadlock_timeout`. One key or none: nothing to order.
 */
function orderingLocksFirst(batch: ReadonlyArray<readonly WriteStatement[]>): QueryConfig[] {
  const keys = new Set<string>()
  for (const statements of batch) {
    for (const statement of statements) {
      const key = orderingKeyOf(statement)
      if (key !== undefined) keys.add(key)
    }
  }
  return keys.size > 1 ? [{ text: LOCK_ORDERING_KEYS, values: [[...keys]] }] : []
}

/** A fenced batch's answers: true for each input whose row the statement returned (`n`), false for the others, whose token no longer held. */
function matchedByRow(count: number, rows: ReadonlyArray<{ n: number }>): Array<Settled<boolean>> {
  const answers: Array<Settled<boolean>> = Array.from({ length: count }, () => ({ ok: true, value: false }))
  for (const { n } of rows) answers[n] = { ok: true, value: true }
  return answers
}

/** How many bytes of JSON a step write adds to a batch's parameter: the results it carries and its own. */
function stepBytes({ input }: { input: Pick<StepBatchInput, 'carried' | 'result'> }): number {
  return Buffer.byteLength(input.carried) + (input.result === undefined ? 0 : Buffer.byteLength(input.result))
}

/** The single claim statement's values (`claim`'s $1 to $8). */
function claimValues(request: ClaimRequest, lockTimeoutMs: number): unknown[] {
  return [request.scope, request.key, request.fingerprint, request.ttlMs, request.claimId, request.fenceToken, lockTimeoutMs, request.staleAfterMs ?? null]
}

/** One claim of the batched claim statement's input, `n` its place in the batch. */
function claimInput(request: ClaimRequest, n: number): ClaimBatchInput {
  return {
    n,
    scope: request.scope,
    key: request.key,
    fingerprint: request.fingerprint,
    ttl_ms: request.ttlMs,
    claim_id: request.claimId,
    fence_token: request.fenceToken,
    stale_after_ms: request.staleAfterMs ?? null,
  }
}

/** The response's body as the bytes it is, without a copy. */
function bodyBytes(outcome: FinalOutcome): Buffer {
  const { body } = outcome.response
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength)
}

/** The single completion's values after the fence (`complete`'s $4 to $7). */
export function completionValues(outcome: FinalOutcome): unknown[] {
  const { response } = outcome
  return [outcome.status, response.status, JSON.stringify(response.headers), bodyBytes(outcome)]
}

/** One completion of the batched completion statement's input, `n` its place in the batch. */
function completionInput({ fence, outcome }: { fence: Fence; outcome: FinalOutcome }, n: number): CompletionBatchInput {
  return {
    n,
    scope: fence.scope,
    key: fence.key,
    fence_token: fence.fenceToken,
    status: outcome.status,
    response_status: outcome.response.status,
    response_headers: outcome.response.headers,
    response_body: bodyBytes(outcome).toString('base64'),
  }
}
