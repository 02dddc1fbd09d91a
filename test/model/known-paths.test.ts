import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { Act, Age, Begin, Blip, endRun, Kill, LostAnswer, Sweep } from './support/commands.js'
import { newModel } from './support/model.js'
import { World } from './support/world.js'

// The paths issue 8 lists, written as command sequences of the model (claims-model.test.ts): each
// proves the model's checks can see that failure, and stays as a regression test once it is fixed.
let db: TestDatabase
let world: World
let run = 0

beforeAll(async () => {
  db = await createTestDatabase({ max: 4 })
  world = await World.open(db)
})

afterAll(async () => {
  await world?.close()
  await db?.close()
})

async function play(commands: Array<fc.AsyncCommand<ReturnType<typeof newModel>, World>>): Promise<void> {
  const model = newModel(`k${process.pid}r${run++}`)
  try {
    await fc.asyncModelRun(() => ({ model, real: world }), commands)
  } finally {
    await endRun(model, world)
  }
}

describe('the paths of issue 8, as model sequences', () => {
  it('a take-over of a claim whose owner died inside its step, then a throw before any step: never deleted, never charged twice', async () => {
    await expect(
      play([new Begin(0, 1, false), new Act(0, 'step-then-die'), new Age(0, 'stale'), new Begin(0, 1, false), new Act(0, 'throw'), new Begin(0, 1, false), new Act(0, 'step')]),
    ).resolves.toBeUndefined()
  })

  it('a claim that may have acted, past its TTL: taken over with its identity, never re-identified', async () => {
    await expect(play([new Begin(0, 1, false), new Act(0, 'step-then-die'), new Age(0, 'ttl'), new Begin(0, 4, false), new Act(0, 'step')])).resolves.toBeUndefined()
  })

  it('a claim that may have acted, past its TTL, asked with another payload: never re-identified (found by the model, seed -549085290)', async () => {
    await expect(play([new Begin(0, 1, false), new Act(0, 'step-then-die'), new Age(0, 'ttl'), new Begin(0, 2, true)])).resolves.toBeUndefined()
  })

  it('the sweeper never deletes a running claim with a committed step', async () => {
    await expect(play([new Begin(0, 1, false), new Act(0, 'step'), new Kill(0), new Age(0, 'ttl'), new Sweep()])).resolves.toBeUndefined()
  })

  it('an owner whose completion met a lost connection stops renewing, so its claim is takeable after stale', async () => {
    const terminatedBefore = world.faults.ownersTerminated
    await expect(play([new Begin(0, 1, false), new Act(0, 'step'), new Blip(0, 'complete'), new Age(0, 'stale'), new Begin(0, 2, false), new Act(0, 'complete')])).resolves.toBeUndefined()
    expect(world.faults.ownersTerminated).toBe(terminatedBefore + 1)
  })

  it('a completion that landed with its answer lost: the owner recognises its own write, and the key replays it', async () => {
    const cutBefore = world.faults.answersCut
    await expect(play([new Begin(0, 1, false), new Act(0, 'step'), new LostAnswer(0, 'complete'), new Begin(0, 3, false), new Age(0, 'stale'), new Begin(0, 3, false)])).resolves.toBeUndefined()
    expect(world.faults.answersCut).toBe(cutBefore + 1)
  })

  it('a phase commit that landed with its answer lost: the claim keeps its identity and its one charge', async () => {
    const cutBefore = world.faults.answersCut
    await expect(play([new Begin(0, 1, false), new LostAnswer(0, 'step'), new Act(0, 'step'), new Act(0, 'complete'), new Begin(0, 2, false)])).resolves.toBeUndefined()
    expect(world.faults.answersCut).toBe(cutBefore + 1)
  })

  it('a suspend after a step that landed with its answer lost: the next retry takes over and resumes, no second charge', async () => {
    const cutBefore = world.faults.answersCut
    await expect(play([new Begin(0, 1, false), new Act(0, 'step'), new LostAnswer(0, 'throw'), new Age(0, 'stale'), new Begin(0, 2, false), new Act(0, 'step'), new Act(0, 'complete')])).resolves.toBeUndefined()
    expect(world.faults.answersCut).toBe(cutBefore + 1)
  })

  it('a settled key replays its first answer byte for byte, to 8 requests at once', async () => {
    await expect(play([new Begin(0, 8, false), new Act(0, 'step'), new Act(0, 'complete'), new Begin(0, 8, false), new Begin(2, 3, false)])).resolves.toBeUndefined()
  })
})
