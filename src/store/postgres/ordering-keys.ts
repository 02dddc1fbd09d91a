/**
 * Which outbox events a statement writes, by ordering key (issue 21): a transaction that writes
 * events of several keys takes their ordering locks first, in one order (`LOCK_ORDERING_KEYS`),
 * and to do so must know the keys of statements it only passes on. The outbox records each
 * prepared event's key here; a copy of the statement object is not recognised, and its lock is
 * then taken where its event is written, as before.
 */

/** The ordering key of the event each `prepareEnqueue` statement writes, by the statement. */
const orderingKeys = new WeakMap<object, string>()

/** Records that `statement` writes an event of `orderingKey`, so it takes that key's ordering lock. */
export function withOrderingKey<T extends object>(statement: T, orderingKey: string): T {
  orderingKeys.set(statement, orderingKey)
  return statement
}

/** The ordering key whose lock `statement` takes, when it is an event's statement from `prepareEnqueue` with a key. */
export function orderingKeyOf(statement: object): string | undefined {
  return orderingKeys.get(statement)
}
