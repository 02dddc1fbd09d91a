import { createHash } from 'node:crypto'
import { NaturalBatch, type Settled } from '../natural-batch.js'
import type { RedisLike } from './options.js'

/** A key's value (null when there is none) and what is left of its life by Redis's clock (`PTTL`). */
export type RawEntry = readonly [value: string | null, remainingMs: number]

/**
 * Runs a command within `withinMs`; undefined when it failed or did not answer in time, or (not
 * sent) when `withinMs` is not positive: each reported as a Redis error.
 */
export type Bounded = <T>(command: () => Promise<T>, withinMs: number) => Promise<T | undefined>

/** The most keys one read script takes: Redis runs a script alone, so it stays short. */
export const MAX_KEYS_PER_READ = 64

// Each key's value and its PTTL, in one command however many keys. A missing value is Lua's
// false, which Redis answers as a null bulk string.
const READ_SCRIPT = "local out = {} for i, k in ipairs(KEYS) do out[2 * i - 1] = redis.call('GET', k) out[2 * i] = redis.call('PTTL', k) end return out"
const READ_SCRIPT_SHA = createHash('sha1').update(READ_SCRIPT).digest('hex')

/**
 * How the cache reads its entries (issue 21). A GET and a PTTL per read cost the client two
 * commands, two promises and two replies each, more than the batched PostgreSQL claim a replay
 * otherwise makes. With scripts, a read leaves at once when none is in flight, and the reads that
 * arrive meanwhile leave together when it answers (natural batching, as the store's claims do):
 * one command for all of them. A Cluster's keys live in different slots, so there each read is a
 * script of its own key; a client without scripts, or a Redis that refuses them, gets the two
 * commands per read.
 *
 * Each read is bounded by `timeoutMs` from the moment it was asked for, time queued behind a
 * batch in flight included: a hanging Redis is a miss within `timeoutMs`, never twice that.
 */
export function rawReads(redis: RedisLike, timeoutMs: number, bounded: Bounded): (redisKey: string) => Promise<RawEntry | undefined> {
  const commands = (keys: string[]) => Promise.all(keys.map(async (key): Promise<RawEntry> => Promise.all([redis.get(key), redis.pttl(key)])))
  if (typeof redis.evalsha !== 'function' || typeof redis.eval !== 'function') {
    return async (redisKey) => (await bounded(() => commands([redisKey]), timeoutMs))?.[0]
  }
  const scripts = redis as RedisLike & Required<Pick<RedisLike, 'evalsha' | 'eval'>>
  // A Redis whose ACL or configuration refuses scripts (NOPERM, an unknown or renamed command)
  // still serves GET and PTTL: refused once, the reads keep to those from then on.
  let refused = false
  const script = async (keys: string[]): Promise<RawEntry[]> => {
    if (refused) return commands(keys)
    let answer: unknown
    try {
      answer = await scripts.evalsha(READ_SCRIPT_SHA, keys.length, ...keys).catch((error: unknown) => {
        // Redis forgets scripts on a restart or SCRIPT FLUSH: sent whole once, it knows it again.
        if (!messageOf(error).startsWith('NOSCRIPT')) throw error
        return scripts.eval(READ_SCRIPT, keys.length, ...keys)
      })
    } catch (error) {
      // EVALSHA or EVAL refused (an ACL may allow one and not the other).
      if (!/^NOPERM|^ERR unknown command/.test(messageOf(error))) throw error
      refused = true
      return commands(keys)
    }
    return entriesOf(answer, keys.length)
  }
  if (redis.isCluster === true) {
    return async (redisKey) => (await bounded(() => script([redisKey]), timeoutMs))?.[0]
  }
  const batch = new NaturalBatch<{ redisKey: string; askedAt: number }, RawEntry | undefined>(MAX_KEYS_PER_READ, async (reads) => {
    // The queue is first in, first out: the first read of the batch has waited longest.
    const left = timeoutMs - (performance.now() - reads[0]!.askedAt)
    const entries = await bounded(() => script(reads.map((read) => read.redisKey)), left)
    return reads.map((_, index): Settled<RawEntry | undefined> => ({ ok: true, value: entries?.[index] }))
  })
  return (redisKey) => batch.submit({ redisKey, askedAt: performance.now() })
}

function entriesOf(answer: unknown, count: number): RawEntry[] {
  if (!Array.isArray(answer) || answer.length !== count * 2) throw new Error(`the read script answered ${describe(answer)} for ${count} keys`)
  const entries: RawEntry[] = []
  for (let i = 0; i < count; i++) {
    const value: unknown = answer[2 * i]
    const remainingMs: unknown = answer[2 * i + 1]
    if ((value !== null && typeof value !== 'string') || typeof remainingMs !== 'number') throw new Error(`the read script answered ${describe(answer)} for ${count} keys`)
    entries.push([value, remainingMs])
  }
  return entries
}

function messageOf(error: unknown): string {
  return String((error as Error | undefined)?.message)
}

function describe(answer: unknown): string {
  return Array.isArray(answer) ? `an array of ${answer.length}` : typeof answer
}
