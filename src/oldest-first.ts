/**
 * A function that deletes the oldest entry of `map` (the first in insertion order) each time it is
 * called, through one iterator kept from one call to the next (issue 21). A new iterator per call,
 * `map.keys().next()`, starts at the first slot of V8's table and steps over every entry deleted
 * since the table was last compacted: with the oldest deleted first, thousands on a full map (the
 * repeated-payload detector: 6 µs an observation at 10 000 entries, against 0.5). A live iterator
 * goes on past entries added after it was made, skips those deleted before it reached them (an
 * entry deleted and set again is at the end), and follows the table through compaction; once it
 * has run off the end it stays done, and a new one is made. It deletes nothing from an empty map.
 * Internal: the repeated-payload detector and the Redis cache's held claims use it.
 */
export function oldestFirst<K>(map: Map<K, unknown>): () => void {
  let oldest = map.keys()
  return () => {
    let next = oldest.next()
    if (next.done === true) {
      oldest = map.keys()
      next = oldest.next()
    }
    if (next.done !== true) map.delete(next.value)
  }
}
