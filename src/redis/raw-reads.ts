import type { RedisLike } from './options.js'
import { batchedWithin, hasScripts, MAX_KEYS_PER_SCRIPT, REFUSED, script, type Bounded } from './scripts.js'

/** A key's value (null when there is none) and what is left of its life by Redis's clock (`PTTL`). */
export type RawEntry = readonly [value: string | null, remainingMs: number]

/** The most keys one read script takes: Redis runs a script alone, so it stays short. */
export const MAX_KEYS_PER_READ = MAX_KEYS_PER_SCRIPT

// Each key's value and its PTTL, in one command however many keys. A missing value is Lua's
// false, which Redis answers as a null bulk string.
const READ_SCRIPT = "local out = {} for i, k in ipairs(KEYS) do out[2 * i - 1] = redis.call('GET', k) out[2 * i] = redis.call('PTTL', k) end return out"

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
  if (!hasScripts(redis)) {
    return async (redisKey) => (await bounded(() => commands([redisKey]), timeoutMs))?.[0]
  }
  const readScript = script(redis, READ_SCRIPT)
  const read = async (keys: string[]) => {
    const answer = await readScript(keys, [])
    return answer === REFUSED ? commands(keys) : entriesOf(answer, keys.length)
  }
  if (redis.isCluster === true) {
    return async (redisKey) => (await bounded(() => read([redisKey]), timeoutMs))?.[0]
  }
  return batchedWithin(timeoutMs, bounded, read)
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

function describe(answer: unknown): string {
  return Array.isArray(answer) ? `an array of ${answer.length}` : typeof answer
}
