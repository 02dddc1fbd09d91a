import type { Execution, RunResult } from '../../../src/index.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import { deferred, type Deferred } from '../../helpers/deferred.js'
import type { FakeProvider } from './fake-provider.js'
import type { Worker } from './worker.js'

/** What the model tells a running handler to do next. */
export type Action = 'step' | 'step-then-die' | 'complete' | 'fail' | 'throw'

/** How an attempt's `engine.run` started: it owns the key, or it got an answer. */
export type Started = { kind: 'execute'; execution: Execution<Queryable> } | { kind: 'answer'; result: RunResult<Queryable> } | { kind: 'error'; error: unknown }

/** How an action ended: the handler went on waiting, `run` settled, or the handler froze (its process died). */
export type Done = { kind: 'waiting' } | { kind: 'ran'; result: RunResult<Queryable> } | { kind: 'threw'; error: unknown } | { kind: 'frozen' }

/** The error a handler throws when told to: a failure of the handler's own, not the store's. */
export class HandlerFailed extends Error {}

/**
 * One request inside `engine.run`, its handler driven step by step by the model's commands:
 * the engine's own run loop, failure policy and lease timer do the rest.
 */
export class Attempt {
  readonly worker: Worker
  readonly body: Buffer
  execution: Execution<Queryable> | undefined
  readonly #started = deferred<Started>()
  #next: Deferred<Action> = deferred()
  #done: Deferred<Done> = deferred()
  #settled: Promise<Done>

  constructor(worker: Worker, input: { scope: string; key: string; fingerprint: string }, provider: FakeProvider, body: Buffer) {
    this.worker = worker
    this.body = body
    const run = worker.engine.run(input, async (execution) => {
      this.execution = execution
      this.#started.resolve({ kind: 'execute', execution })
      for (;;) {
        const action = await this.#next.promise
        this.#next = deferred()
        if (action === 'complete') return { status: 201, headers: [['content-type', 'application/json']], body }
        if (action === 'fail') {
          const failed = { status: 402, headers: [['content-type', 'application/json']] as Array<[string, string]>, body }
          await execution.fail(failed)
          return failed
        }
        if (action === 'throw') throw new HandlerFailed('the handler failed')
        await execution.step('charge', async ({ providerKey }) => {
          const charge = provider.charge(providerKey, input.scope, input.key)
          if (action === 'step-then-die') {
            // The provider charged; the process dies before the phase commits.
            this.#done.resolve({ kind: 'frozen' })
            return new Promise<never>(() => {})
          }
          return charge
        })
        this.#done.resolve({ kind: 'waiting' })
      }
    })
    this.#settled = run.then(
      (result) => {
        this.#started.resolve({ kind: 'answer', result })
        return { kind: 'ran', result } as const
      },
      (error: unknown) => {
        this.#started.resolve({ kind: 'error', error })
        return { kind: 'threw', error } as const
      },
    )
  }

  /** Resolves once the engine decided: this attempt owns the key, or `run` already answered. */
  started(): Promise<Started> {
    return this.#started.promise
  }

  /** Tells the handler what to do; resolves once it has done it. */
  async act(action: Action, meanwhile?: () => Promise<void>): Promise<Done> {
    this.#done = deferred()
    this.#next.resolve(action)
    const during = meanwhile?.()
    const done = await Promise.race([this.#done.promise, this.#settled])
    await during
    return done
  }
}
