import type { RedisLike } from './options.js'
import { batchedWithin, hasScripts, REFUSED, script, type Bounded } from './scripts.js'

/** One value to set with its life in Redis (`PX`); `onlyIfAbsent` writes it only where the key has none (`NX`). */
export interface RawWrite {
  redisKey: string
  value: string
  lifeMs: number
  onlyIfAbsent: boolean
}

// Each key set in the order given, with its life, and NX where its third argument says so.
const WRITE_SCRIPT =
  "for i, k in ipairs(KEYS) do local a = 3 * i - 2 if ARGV[a + 2] == 'NX' then redis.call('SET', k, ARGV[a], 'PX', ARGV[a + 1], 'NX') else redis.call('SET', k, ARGV[a], 'PX', ARGV[a + 1]) end end return #KEYS"

/**
 * How the cache writes its entries (issue 21): as it reads them. A fresh key's two entries (its
 * claim in flight, then its outcome) cost a SET each, and each SET the client a command, a
 * promise, a reply and, between the turns of the event loop, a socket write of its own: the
 * writes that arrive while one is in flight leave together as one script when it answers. Writes
 * keep the order they were asked in, in a batch and from batch to batch (one batch in flight at a
 * time, on the client's one connection), so an eviction or an outcome always lands after the
 * claim's entry it replaces. A Cluster (its keys in different slots), a client without scripts and
 * a Redis that refuses them get a SET per write.
 *
 * Resolves true when Redis took the write (an `NX` write may have found the key taken), false when
 * it failed or did not answer within `timeoutMs` of being asked for (reported as a Redis error).
 */
export function rawWrites(redis: RedisLike, timeoutMs: number, bounded: Bounded): (write: RawWrite) => Promise<boolean> {
  const set = (write: RawWrite) =>
    write.onlyIfAbsent ? redis.set(write.redisKey, write.value, 'PX', write.lifeMs, 'NX') : redis.set(write.redisKey, write.value, 'PX', write.lifeMs)
  if (!hasScripts(redis) || redis.isCluster === true) {
    return async (write) => (await bounded(() => set(write), timeoutMs)) !== undefined
  }
  const writeScript = script(redis, WRITE_SCRIPT)
  const batch = batchedWithin(timeoutMs, bounded, async (writes: RawWrite[]) => {
    const args: string[] = []
    for (const write of writes) args.push(write.value, String(write.lifeMs), write.onlyIfAbsent ? 'NX' : '')
    // Refused: each a SET of its own, sent in order on the one connection.
    if ((await writeScript(writes.map((write) => write.redisKey), args)) === REFUSED) await Promise.all(writes.map(set))
    return writes.map(() => true)
  })
  return async (write) => (await batch(write)) === true
}
