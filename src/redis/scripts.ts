import { createHash } from 'node:crypto'
import { NaturalBatch, type Settled } from '../natural-batch.js'
import type { RedisLike } from './options.js'

/**
 * Runs a command within `withinMs`; undefined when it failed or did not answer in time, or (not
 * sent) when `withinMs` is not positive: each reported as a Redis error.
 */
export type Bounded = <T>(command: () => Promise<T>, withinMs: number) => Promise<T | undefined>

/** The most keys one script takes: Redis runs a script alone, so it stays short. */
export const MAX_KEYS_PER_SCRIPT = 64

/** A client that has scripts. */
type Scripting = RedisLike & Required<Pick<RedisLike, 'evalsha' | 'eval'>>

/** True when the client has scripts (an `ioredis` client does; a client of only GET, PTTL and SET does not). */
export function hasScripts(redis: RedisLike): redis is Scripting {
  return typeof redis.evalsha === 'function' && typeof redis.eval === 'function'
}

/** What a script answered, or `REFUSED`: Redis refuses scripts, so the plain commands must serve. */
export const REFUSED = Symbol('scripts refused')

/**
 * `text` sent by its SHA1, and whole when Redis answers NOSCRIPT (it forgets scripts on a restart
 * or `SCRIPT FLUSH`). A Redis whose ACL or configuration refuses scripts (NOPERM, an unknown or
 * renamed command) still serves the plain commands: refused once, every later call answers
 * `REFUSED` without asking.
 */
export function script(redis: Scripting, text: string): (keys: string[], args: string[]) => Promise<unknown> {
  const sha = createHash('sha1').update(text).digest('hex')
  let refused = false
  return async (keys, args) => {
    if (refused) return REFUSED
    try {
      return await redis.evalsha(sha, keys.length, ...keys, ...args).catch((error: unknown) => {
        if (!messageOf(error).startsWith('NOSCRIPT')) throw error
        return redis.eval(text, keys.length, ...keys, ...args)
      })
    } catch (error) {
      // EVALSHA or EVAL refused (an ACL may allow one and not the other).
      if (!/^NOPERM|^ERR unknown command/.test(messageOf(error))) throw error
      refused = true
      return REFUSED
    }
  }
}

/**
 * Natural batching of one kind of command (issue 21), as the store's claims: one leaves at once
 * when none of its kind is in flight, and those that arrive meanwhile leave together when it
 * answers, up to `MAX_KEYS_PER_SCRIPT`. `send` answers each item of a batch in its order, or
 * undefined for all of them when the batch failed or did not answer in time. Each item is bounded
 * by `timeoutMs` from the moment it was asked for, time queued behind a batch in flight included:
 * a hanging Redis fails an item within `timeoutMs`, never twice that.
 */
export function batchedWithin<In, Out>(
  timeoutMs: number,
  bounded: Bounded,
  send: (inputs: In[]) => Promise<Out[]>,
): (input: In) => Promise<Out | undefined> {
  const batch = new NaturalBatch<{ input: In; askedAt: number }, Out | undefined>(MAX_KEYS_PER_SCRIPT, async (items) => {
    // The queue is first in, first out: the first item of the batch has waited longest.
    const left = timeoutMs - (performance.now() - items[0]!.askedAt)
    const outputs = await bounded(() => send(items.map((item) => item.input)), left)
    return items.map((_, index): Settled<Out | undefined> => ({ ok: true, value: outputs?.[index] }))
  })
  return (input) => batch.submit({ input, askedAt: performance.now() })
}

function messageOf(error: unknown): string {
  return String((error as Error | undefined)?.message)
}
