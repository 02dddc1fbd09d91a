/**
 * Model-based search for the next second charge or stuck key (issue 8), with fast-check's
 * `commands` against the real engine and PostgreSQL store, in process.
 *
 * Each run is a random sequence of commands on three keys (two of one user, the first key again
 * under a second user): begin (1–8 requests at once, each from its own worker with its own
 * connection), step (the provider call, counted at a fake provider by the derived step key),
 * complete, fail (a stored 402), throw (before or after a step), a step during which the owner's
 * process dies, kill the owner between steps (its backends terminated, its handler abandoned),
 * a connection lost during the owner's next write, age a claim past stale or past its TTL (its
 * timestamps moved back with SQL: the database's clock), sweep, terminate every connection.
 * After every command the invariants are checked (test/model/support/model.ts and the checks in
 * `begin`): at most one charge per (user, key) within one TTL; a claim that may have acted is
 * never deleted or re-identified before it is settled; a replay equals the first answer byte
 * for byte; no live claim is taken over; a claim whose owner is gone is takeable within stale +
 * one renewal; no action hangs.
 *
 * Runs: ONCELY_MODEL_RUNS (default 150) sequences of up to ONCELY_MODEL_COMMANDS (default 14)
 * commands. More on demand: ONCELY_MODEL_RUNS=2000 npx vitest run test/model.
 *
 * A failure prints fast-check's report (the seed, the path, the shrunk command list and the
 * violated invariant) and the exact line that replays that sequence:
 *   ONCELY_MODEL_SEED=<seed> ONCELY_MODEL_PATH="<path>" ONCELY_MODEL_REPLAY_PATH="<replay path>" \
 *   ONCELY_MODEL_COMMANDS=<n> npx vitest run test/model/claims-model.test.ts The commands replay exactly; the timing of a lease
 * renewal against a lost connection is real, so a replay fails the same way nearly always.
 *
 * The model exercises the store's SQL under real concurrency (claims racing, row locks, lock
 * waits), which is the server's behaviour, so it runs in both of CI's passes.
 */
import fc from 'fast-check'
import { afterAll, beforeAll, describe, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { endRun, modelCommands } from './support/commands.js'
import { newModel } from './support/model.js'
import { World } from './support/world.js'

const runs = Number(process.env.ONCELY_MODEL_RUNS ?? 150)
const maxCommands = Number(process.env.ONCELY_MODEL_COMMANDS ?? 14)
const seed = process.env.ONCELY_MODEL_SEED === undefined ? undefined : Number(process.env.ONCELY_MODEL_SEED)
const path = process.env.ONCELY_MODEL_PATH
const replayPath = process.env.ONCELY_MODEL_REPLAY_PATH

let db: TestDatabase
let world: World

beforeAll(async () => {
  db = await createTestDatabase({ max: 4 })
  world = await World.open(db)
})

afterAll(async () => {
  await world?.close()
  await db?.close()
})

describe('the claim lifecycle against a model', () => {
  it(`keeps every invariant over ${runs} random command sequences`, { timeout: 600_000 }, async () => {
    let run = 0
    const details = await fc.check(
      fc.asyncProperty(fc.commands(modelCommands(), { maxCommands, size: 'medium', ...(replayPath === undefined ? {} : { replayPath }) }), async (commands) => {
        const model = newModel(`m${process.pid}r${run++}`)
        try {
          await fc.asyncModelRun(() => ({ model, real: world }), commands)
        } finally {
          await endRun(model, world)
        }
      }),
      { numRuns: runs, ...(seed === undefined ? {} : { seed }), ...(path === undefined ? {} : { path }) },
    )
    if (details.failed) {
      const replay = /replayPath="([^"]*)"/.exec(fc.stringify(details.counterexample))?.[1]
      const report = fc.defaultReportMessage(details) ?? ''
      throw new Error(
        `${report}\nReplay this sequence: ONCELY_MODEL_SEED=${details.seed} ONCELY_MODEL_PATH="${details.counterexamplePath ?? ''}"` +
          `${replay === undefined ? '' : ` ONCELY_MODEL_REPLAY_PATH="${replay}"`} ONCELY_MODEL_COMMANDS=${maxCommands} npx vitest run test/model/claims-model.test.ts`,
        { cause: details.errorInstance },
      )
    }
  })
})
