import pg from 'pg'
import { createEngine, fingerprintRequest, type Engine, type StoredResponse } from '../src/index.js'
import { createOutbox } from '../src/outbox/index.js'
import { createPostgresStore, migrate, type Queryable } from '../src/store/postgres/index.js'
import { countingPool } from '../test/helpers/counting-pool.js'
import { figure, type Figure } from './report.js'
import { median } from './stats.js'

const SCHEMA = 'bench_round_trips'
const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_1","amount":1000}') }

interface Outcome {
  name: string
  /** DESIGN.md's cost budget, in round trips. */
  budget: number
  /** Runs on the pipelining pool instead of the plain one. */
  pipelined?: boolean
  run(engine: Engine<Queryable>, i: number): Promise<void>
}

/**
 * Round trips per outcome (issue 11, benchmark 3), counted on the pool: every statement the
 * engine sends, and the round trips they took (on a pipelining pool, a statement sent while an
 * earlier one of its transaction is unanswered shares that one's round trip). Beside each count,
 * the median latency of the outcome against a `SELECT` by primary key (the cheapest round trip),
 * measured sequentially in the same run.
 */
export async function roundTripBench(url: string, options: { iterations: number }): Promise<Figure[]> {
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  // The reference service's pool: node-postgres in pipeline mode.
  const pipelining = new pg.Pool({ connectionString: url, max: 4, pipeline: true })
  try {
    await migrate({ pool, schema: SCHEMA })
    await pool.query(`CREATE TABLE ${SCHEMA}.business (id text PRIMARY KEY, body bytea)`)
    await pool.query(`CREATE TABLE ${SCHEMA}.baseline (scope text, key text, body bytea, PRIMARY KEY (scope, key))`)
    await pool.query(`INSERT INTO ${SCHEMA}.baseline VALUES ('u', 'one', '\\x00')`)
    const counter = countingPool(pool)
    const engine = createEngine<Queryable>({ store: createPostgresStore({ pool: counter, schema: SCHEMA }) })
    const pipelinedCounter = countingPool(pipelining)
    const pipelinedEngine = createEngine<Queryable>({ store: createPostgresStore({ pool: pipelinedCounter, schema: SCHEMA }) })
    const outbox = createOutbox({ schema: SCHEMA, notify: false })
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
    const other = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2000 } })
    const done = await engine.begin({ scope: 'u', key: 'done', fingerprint })
    if (done.kind === 'execute') await done.execution.complete(response)
    const running = await engine.begin({ scope: 'u', key: 'running', fingerprint })

    const expect = async (key: string, print: string, kind: string) => {
      const decision = await engine.begin({ scope: 'u', key, fingerprint: print })
      if (decision.kind !== kind) throw new Error(`expected ${kind}, got ${decision.kind}`)
    }
    const fresh = async (key: string) => {
      const decision = await engine.begin({ scope: 'u', key, fingerprint })
      if (decision.kind !== 'execute') throw new Error(`fresh key answered ${decision.kind}`)
      return decision.execution
    }
    const serviceSteps = async (on: Engine<Queryable>, key: string) => {
      const decision = await on.begin({ scope: 'u', key, fingerprint })
      if (decision.kind !== 'execute') throw new Error(`fresh key answered ${decision.kind}`)
      const execution = decision.execution
      await execution.step('charge', ({ providerKey }) => ({ id: providerKey.slice(0, 8) }), { commit: 'with-next-write' })
      // Sent once the completion committed: its commit is the receipt's record (issue 21).
      execution.afterCompletion('receipt', () => true)
      return execution
    }
    const outcomes: Outcome[] = [
      { name: 'replay', budget: 1, run: () => expect('done', fingerprint, 'replay') },
      { name: 'conflict (409)', budget: 1, run: () => expect('running', fingerprint, 'conflict') },
      { name: 'mismatch (422)', budget: 1, run: () => expect('done', other, 'mismatch') },
      { name: 'fresh: claim + completion', budget: 2, run: async (_, i) => (await fresh(`plain-${i}`)).complete(response) },
      {
        name: 'fresh: claim + one step + completion',
        budget: 3,
        run: async (_, i) => {
          const execution = await fresh(`step-${i}`)
          await execution.step('charge', ({ providerKey }) => ({ id: providerKey.slice(0, 8) }))
          await execution.complete(response)
        },
      },
      {
        name: 'fresh: claim + one step + completion transaction with a business row',
        budget: 3,
        run: async (_, i) => {
          const execution = await fresh(`service-${i}`)
          await execution.step('charge', ({ providerKey }) => ({ id: providerKey.slice(0, 8) }))
          await execution.completeInTransaction(async (tx) => {
            await tx.query({ text: `INSERT INTO ${SCHEMA}.business VALUES ($1, $2)`, values: [`b-${i}`, response.body] })
            return { response, value: undefined }
          })
        },
      },
      {
        // The charge's result needs no commit of its own (its provider dedupes by the step's key),
        // the at-most-once receipt is sent after the completion, whose commit records it; the
        // business row and the event leave with the completion, as statements in one flight with
        // BEGIN and COMMIT.
        name: 'fresh: claim + charge + completion with a business row and an event as statements + receipt after it, pipelined (the service)',
        budget: 2,
        pipelined: true,
        run: async (engine, i) => {
          const execution = await serviceSteps(engine, `pipelined-${i}`)
          const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_bench', payload: { i } })
          await execution.complete(response, {
            statements: [{ text: `INSERT INTO ${SCHEMA}.business VALUES ($1, $2)`, values: [`p-${i}`, response.body] }, event.statement],
          })
        },
      },
      {
        // The same with the writes as a function: the COMMIT waits for the writes' answers.
        name: 'the same with the writes as a function (writes), pipelined',
        budget: 3,
        pipelined: true,
        run: async (engine, i) => {
          const execution = await serviceSteps(engine, `pipelined-writes-${i}`)
          await execution.complete(response, {
            writes: async (tx) => {
              await Promise.all([
                tx.query({ text: `INSERT INTO ${SCHEMA}.business VALUES ($1, $2)`, values: [`w-${i}`, response.body] }),
                outbox.enqueue(tx, { type: 'charge.succeeded', key: 'cus_bench', payload: { i } }),
              ])
            },
          })
        },
      },
    ]

    const select = await sequential(options.iterations, async () => {
      await pool.query({ name: 'bench_select', text: `SELECT body FROM ${SCHEMA}.baseline WHERE scope = $1 AND key = $2`, values: ['u', 'one'] })
    })
    const figures: Figure[] = []
    for (const outcome of outcomes) {
      const count = outcome.pipelined === true ? pipelinedCounter : counter
      count.reset()
      const latencies = await sequential(options.iterations, (i) => outcome.run(outcome.pipelined === true ? pipelinedEngine : engine, i))
      const statements = count.statements.length / (options.iterations + WARM_UP)
      const roundTrips = count.roundTrips() / (options.iterations + WARM_UP)
      figures.push(
        figure(
          {
            section: 'round trips per outcome (sequential)',
            name: outcome.name,
            unit: 'ms',
            runs: [median(latencies)],
            baseline: { name: 'SELECT by primary key', value: median(select) },
            extra: {
              statements: statements.toFixed(2),
              'round trips': roundTrips.toFixed(2),
              budget: outcome.budget,
              'within budget': roundTrips <= outcome.budget ? 'yes' : `no (${(roundTrips - outcome.budget).toFixed(0)} over)`,
              sequence: count.statements.slice(-Math.round(statements)).join(', '),
            },
          },
          median(latencies),
        ),
      )
    }
    if (running.kind === 'execute') await running.execution.release()
    return figures
  } finally {
    await pipelining.end()
    await pool.end()
  }
}

const WARM_UP = 20

async function sequential(iterations: number, op: (i: number) => Promise<void>): Promise<number[]> {
  for (let i = 0; i < WARM_UP; i++) await op(-i - 1)
  const times: number[] = []
  for (let i = 0; i < iterations; i++) {
    const start = performance.now()
    await op(i)
    times.push(performance.now() - start)
  }
  return times
}
