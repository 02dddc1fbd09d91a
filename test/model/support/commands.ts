import fc from 'fast-check'
import { isOncelyError } from '../../../src/index.js'
import { sweepExpiredKeys } from '../../../src/ops/sweeper.js'
import { Attempt, HandlerFailed, type Action, type Done } from './attempt.js'
import { checkInvariants, describeKey, InvariantViolation, type KeyModel, type Model } from './model.js'
import { MAX_CONCURRENT, type World } from './world.js'
import { MODEL_TIMING } from './worker.js'

type ModelCommand = fc.AsyncCommand<Model, World>

/** An action or a decision that takes longer than this hangs, and the run fails naming it. */
const HANG_MS = 10_000

function withinHangLimit<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new InvariantViolation(`${what} did not finish within ${HANG_MS} ms`)), HANG_MS)
  })
  return Promise.race([promise, hung]).finally(() => clearTimeout(timer))
}

const nextBody = (model: Model) => Buffer.from(JSON.stringify({ answer: ++model.answers }))

/** `n` requests for one key at once, each from its own worker (1–8 concurrent). */
export class Begin implements ModelCommand {
  constructor(
    readonly index: number,
    readonly n: number,
    readonly otherPayload: boolean,
  ) {}

  check(): boolean {
    return true
  }

  async run(model: Model, world: World): Promise<void> {
    const key = model.keys[this.index] as KeyModel
    const fingerprint = this.otherPayload ? (key.fingerprint === 'f1' ? 'f2' : 'f1') : key.fingerprint
    const before = { exists: key.exists, live: key.owner !== undefined, settled: key.settled, age: key.age, suspended: key.suspended }
    const workers = await Promise.all(Array.from({ length: this.n }, (_, slot) => world.worker(slot)))
    const attempts = workers.map((worker) => new Attempt(worker, { scope: key.scope, key: key.key, fingerprint }, world.provider, nextBody(model)))
    const starts = await withinHangLimit(`${String(this)} deciding`, Promise.all(attempts.map((attempt) => attempt.started())))
    const owners = attempts.filter((_, i) => starts[i]?.kind === 'execute')
    const failed = starts.filter((start) => start.kind === 'error').length
    const what = `${String(this)} on ${describeKey(key)}`
    if (owners.length > 1) throw new InvariantViolation(`${what}: ${owners.length} requests own the key at once`)
    if (before.live && owners.length > 0) throw new InvariantViolation(`${what}: a live claim (its owner renewing) was taken over`)
    const current = before.exists && before.age !== 'expired'
    if (current && fingerprint !== key.fingerprint) {
      const wrong = starts.filter((start) => start.kind === 'execute' || (start.kind === 'answer' && start.result.kind === 'replay'))
      if (wrong.length > 0) throw new InvariantViolation(`${what}: a different payload was executed or replayed instead of refused`)
    } else if (current && before.settled) {
      for (const start of starts) {
        if (start.kind === 'error') continue
        if (start.kind === 'execute') throw new InvariantViolation(`${what}: a settled key ran again`)
        const { result } = start
        if (result.kind !== 'replay') throw new InvariantViolation(`${what}: a settled key answered ${result.kind}, not its replay`)
        if (result.response.status !== before.settled.status || !Buffer.from(result.response.body).equals(before.settled.body)) {
          throw new InvariantViolation(`${what}: the replay (${result.response.status} ${Buffer.from(result.response.body).toString()}) differs from the first answer (${before.settled.status} ${before.settled.body.toString()})`)
        }
      }
    } else if (current && !before.live && (before.suspended || before.age === 'stale') && failed === 0 && owners.length === 0) {
      throw new InvariantViolation(`${what}: the claim's owner is gone and its lease is past stale + one renewal, yet no request could take it over (${starts.map((s) => (s.kind === 'answer' ? s.result.kind : s.kind)).join(', ')})`)
    }
    if (!before.exists && failed === 0 && owners.length !== 1) throw new InvariantViolation(`${what}: a key with no record was not claimed`)

    const winner = owners[0]
    if (winner?.execution) {
      const startsNewTtl = !before.exists || (before.age === 'expired' && before.settled !== undefined)
      if (startsNewTtl) {
        key.chargedBefore = new Set(world.provider.chargedKeys(key.scope, key.key))
        key.settled = undefined
        key.acted = false
      }
      if (key.acted && winner.execution.claimId !== key.claimId) {
        throw new InvariantViolation(`${what}: the claim ${key.claimId} may have acted and was re-identified as ${winner.execution.claimId}`)
      }
      Object.assign(key, { claimId: winner.execution.claimId, owner: winner, orphan: undefined, suspended: false, age: 'fresh', exists: true, fingerprint })
    } else if (key.settled === undefined && fingerprint === key.fingerprint) {
      // A stored answer the model did not see being stored (its owner never heard that its write
      // landed): the first replay is the first answer every later replay must equal.
      const replay = starts.find((start) => start.kind === 'answer' && start.result.kind === 'replay')
      if (replay?.kind === 'answer' && replay.result.kind === 'replay') {
        key.settled = { status: replay.result.response.status, body: Buffer.from(replay.result.response.body) }
        key.acted = false
      }
    } else if (failed > 0 && !before.exists) {
      // The claim may have committed with its answer lost: a claim nobody in the process holds.
      const row = await world.row(key.scope, key.key)
      if (row) Object.assign(key, { claimId: row.claim_id, exists: true, fingerprint, age: 'fresh' })
    }
    await checkInvariants(model, world)
  }

  toString(): string {
    return `begin(key ${this.index}, ${this.n} at once${this.otherPayload ? ', other payload' : ''})`
  }
}

/** The owner's process dies, and with it every handler that process ran, whatever key it held. */
async function killWorker(model: Model, world: World, owner: Attempt): Promise<void> {
  await owner.worker.kill(world.admin)
  for (const key of model.keys) {
    if (key.owner?.worker === owner.worker) key.owner = undefined
    if (key.orphan?.worker === owner.worker) key.orphan = undefined
  }
}

/** What the model learns from how an owner's action ended. */
async function learn(model: Model, world: World, key: KeyModel, owner: Attempt, done: Done, what: string): Promise<void> {
  switch (done.kind) {
    case 'waiting':
      return
    case 'frozen':
      await killWorker(model, world, owner)
      return
    case 'ran':
      key.owner = undefined
      if (done.result.kind === 'executed') {
        key.settled = { status: done.result.response.status, body: Buffer.from(done.result.response.body) }
        key.acted = false
        key.suspended = false
      }
      return
    case 'threw': {
      key.owner = undefined
      if (isOncelyError(done.error, 'ONCELY_LOCK_LOST')) throw new InvariantViolation(`${what} on ${describeKey(key)}: a live owner lost its claim`)
      if (done.error instanceof HandlerFailed) {
        // The failure policy ran: the claim was released (deleted) or suspended.
        const row = await world.row(key.scope, key.key)
        if (!row && !key.acted) key.claimId = undefined
        if (row?.suspended) key.suspended = true
        return
      }
      // A store error ended the handler with its claim still in progress.
      key.orphan = owner
    }
  }
}

/** The key's owner does one thing: a step, a completion, a stored failure, a throw, or a step during which its process dies. */
export class Act implements ModelCommand {
  constructor(
    readonly index: number,
    readonly action: Action,
  ) {}

  check(model: Readonly<Model>): boolean {
    return model.keys[this.index]?.owner !== undefined
  }

  async run(model: Model, world: World): Promise<void> {
    const key = model.keys[this.index] as KeyModel
    const owner = key.owner as Attempt
    // A step may have its effect from the moment it begins.
    if (this.action === 'step' || this.action === 'step-then-die') key.acted = true
    const done = await withinHangLimit(String(this), owner.act(this.action))
    await learn(model, world, key, owner, done, String(this))
    await checkInvariants(model, world)
  }

  toString(): string {
    return `${this.action}(key ${this.index})`
  }
}

/** The owner's process dies between two actions: its connections terminated, its handler never heard from again. */
export class Kill implements ModelCommand {
  constructor(readonly index: number) {}

  check(model: Readonly<Model>): boolean {
    return model.keys[this.index]?.owner !== undefined
  }

  async run(model: Model, world: World): Promise<void> {
    await killWorker(model, world, (model.keys[this.index] as KeyModel).owner as Attempt)
    await checkInvariants(model, world)
  }

  toString(): string {
    return `kill-owner(key ${this.index})`
  }
}

/**
 * The owner's next write meets a dead connection: the row is locked, the action's statement
 * waits on it, the owner's backend is terminated, the lock let go. The action then ends however
 * the engine makes it end.
 */
export class Blip implements ModelCommand {
  constructor(
    readonly index: number,
    readonly action: Exclude<Action, 'step-then-die'>,
  ) {}

  check(model: Readonly<Model>): boolean {
    const key = model.keys[this.index]
    // A step already committed returns its stored result without a write: nothing to cut.
    return key?.owner !== undefined && (this.action !== 'step' || !key.acted)
  }

  async run(model: Model, world: World): Promise<void> {
    const key = model.keys[this.index] as KeyModel
    const owner = key.owner as Attempt
    if (this.action === 'step') key.acted = true
    await world.admin.query('BEGIN')
    await world.admin.query(`SELECT 1 FROM ${world.table} WHERE scope = $1 AND key = $2 FOR UPDATE`, [key.scope, key.key])
    const done = await withinHangLimit(
      String(this),
      owner.act(this.action, async () => {
        try {
          if (await world.waitsOnLock(owner.worker)) await world.terminate(owner.worker)
        } finally {
          await world.admin.query('COMMIT')
        }
      }),
    )
    await learn(model, world, key, owner, done, String(this))
    await checkInvariants(model, world)
  }

  toString(): string {
    return `connection-lost-during-${this.action}(key ${this.index})`
  }
}

/**
 * The owner's next write lands but its answer is lost: the row is locked, the action's statement
 * waits on it, the worker's proxy is told to cut the next answer, the lock is let go. The
 * statement commits and the connection dies before the owner hears of it (issue 8, path 16).
 */
export class LostAnswer implements ModelCommand {
  constructor(
    readonly index: number,
    readonly action: Exclude<Action, 'step-then-die'>,
  ) {}

  check(model: Readonly<Model>): boolean {
    const key = model.keys[this.index]
    return key?.owner !== undefined && (this.action !== 'step' || !key.acted)
  }

  async run(model: Model, world: World): Promise<void> {
    const key = model.keys[this.index] as KeyModel
    const owner = key.owner as Attempt
    if (this.action === 'step') key.acted = true
    await world.admin.query('BEGIN')
    await world.admin.query(`SELECT 1 FROM ${world.table} WHERE scope = $1 AND key = $2 FOR UPDATE`, [key.scope, key.key])
    const done = await withinHangLimit(
      String(this),
      owner.act(this.action, async () => {
        try {
          if (await world.waitsOnLock(owner.worker)) void owner.worker.proxy.cutNextAnswer().then(() => world.faults.answersCut++)
        } finally {
          await world.admin.query('COMMIT')
        }
      }),
    )
    await learn(model, world, key, owner, done, String(this))
    await checkInvariants(model, world)
  }

  toString(): string {
    return `answer-lost-after-${this.action}(key ${this.index})`
  }
}

/** Database time passes for a key nobody live holds: past the stale threshold, or past its TTL. */
export class Age implements ModelCommand {
  constructor(
    readonly index: number,
    readonly past: 'stale' | 'ttl',
  ) {}

  check(model: Readonly<Model>): boolean {
    const key = model.keys[this.index]
    return key !== undefined && key.exists && key.owner === undefined
  }

  async run(model: Model, world: World): Promise<void> {
    const key = model.keys[this.index] as KeyModel
    await world.age(key.scope, key.key, this.past)
    key.age = this.past === 'ttl' ? 'expired' : key.age === 'expired' ? 'expired' : 'stale'
    // A handler that ended with its claim in progress must have stopped renewing: give a wrong
    // renewal the time to land (Invariant 12: takeable within stale + one renewal).
    if (key.orphan) await new Promise((resolve) => setTimeout(resolve, 3 * MODEL_TIMING.leaseRenewMs))
    await checkInvariants(model, world)
  }

  toString(): string {
    return `age-past-${this.past}(key ${this.index})`
  }
}

export class Sweep implements ModelCommand {
  check(): boolean {
    return true
  }

  async run(model: Model, world: World): Promise<void> {
    await sweepExpiredKeys(world.sweeper, { batchSize: 50 })
    for (const key of model.keys) {
      if (key.settled === undefined || key.age !== 'expired') continue
      if (await world.row(key.scope, key.key)) continue
      // A settled key past its TTL is gone: the next request is a new one.
      Object.assign(key, { settled: undefined, exists: false, claimId: undefined, chargedBefore: new Set(world.provider.chargedKeys(key.scope, key.key)) })
    }
    await checkInvariants(model, world)
  }

  toString(): string {
    return 'sweep'
  }
}

export class TerminateAll implements ModelCommand {
  check(): boolean {
    return true
  }

  async run(model: Model, world: World): Promise<void> {
    await world.terminateAll()
    await checkInvariants(model, world)
  }

  toString(): string {
    return 'terminate-all-connections'
  }
}

/**
 * The commands, weighted (fast-check picks each arbitrary of the list alike, so a command listed
 * twice comes twice as often) so that claims get far enough to act, fail and be taken over.
 */
export function modelCommands(): Array<fc.Arbitrary<ModelCommand>> {
  // The first key most often, so one key's story gets long enough to reach its corners.
  const key = fc.constantFrom(0, 0, 0, 1, 2)
  const begin = fc.tuple(key, fc.integer({ min: 1, max: MAX_CONCURRENT }), fc.integer({ min: 0, max: 7 }).map((n) => n === 0)).map(([index, n, other]) => new Begin(index, n, other))
  const act = fc.tuple(key, fc.constantFrom<Action>('step', 'step', 'complete', 'fail', 'throw', 'step-then-die')).map(([index, action]) => new Act(index, action))
  const writes = fc.constantFrom<Exclude<Action, 'step-then-die'>>('step', 'complete', 'fail', 'throw')
  const blip = fc.tuple(key, writes).map(([index, action]) => new Blip(index, action))
  const lostAnswer = fc.tuple(key, writes).map(([index, action]) => new LostAnswer(index, action))
  const age = fc.tuple(key, fc.constantFrom<'stale' | 'ttl'>('stale', 'stale', 'ttl')).map(([index, past]) => new Age(index, past))
  return [begin, begin, begin, act, act, act, blip, lostAnswer, key.map((index) => new Kill(index)), age, age, fc.constant(new Sweep()), fc.constant(new TerminateAll())]
}

/** Ends a run: live handlers fail, every row of the run is deleted, so no execution of it keeps renewing. */
export async function endRun(model: Model, world: World): Promise<void> {
  for (const key of model.keys) {
    const owner = key.owner
    key.owner = undefined
    if (owner) await withinHangLimit('ending a live handler', owner.act('throw')).catch(() => {})
  }
  await world.forget(model.scopePrefix)
}
