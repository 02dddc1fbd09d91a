/**
 * A store decorator's result: `overrides`, and every other member of `store` forwarded to it.
 * The members are gathered along the whole prototype chain, so a store written as a class keeps
 * its methods (an object spread copies own enumerable properties only), and each forwarded method
 * runs with `this` the store itself, so one reading a private field still works. A member that is
 * not a function is read from the store when it is read, never copied once.
 */
export function decorateStore<P extends object, S extends P>(store: S, overrides: Partial<P>): S {
  const names = new Set<PropertyKey>()
  for (let level: object | null = store; level !== null && level !== Object.prototype; level = Reflect.getPrototypeOf(level)) {
    for (const name of Reflect.ownKeys(level)) if (name !== 'constructor') names.add(name)
  }
  const decorated: Record<PropertyKey, unknown> = {}
  for (const name of names) {
    if (Object.hasOwn(overrides, name)) continue
    const member: unknown = Reflect.get(store, name)
    if (typeof member === 'function') Object.defineProperty(decorated, name, { value: member.bind(store), enumerable: true })
    else Object.defineProperty(decorated, name, { get: () => Reflect.get(store, name), enumerable: true })
  }
  return Object.freeze(Object.assign(decorated, overrides)) as S
}
