/** The web classes a test may count the instances of. */
interface Countable {
  Request: typeof Request
  Response: typeof Response
  Headers: typeof Headers
}

export interface ConstructionCount {
  /** Instances built since the count started or was last reset. */
  count(): number
  reset(): void
  /** Puts the original class back in the global. */
  restore(): void
}

/**
 * Counts every `new Request(…)` (or `Response`, or `Headers`) built from now on in this module graph, by putting
 * a subclass that counts in the global's place. A module that keeps the global it finds when it
 * loads (`@hono/node-server` keeps both) must be imported after this call, with `await import()`.
 *
 * @example
 * ```ts
 * const requests = countConstructions('Request')
 * const { serve } = await import('@hono/node-server')
 * ```
 */
export function countConstructions(name: keyof Countable): ConstructionCount {
  const original = globalThis[name]
  let built = 0
  const Base = original as unknown as new (...args: unknown[]) => object
  class Counting extends Base {
    constructor(...args: unknown[]) {
      super(...args)
      built++
    }
  }
  Reflect.set(globalThis, name, Counting)
  return {
    count: () => built,
    reset: () => void (built = 0),
    restore: () => void Reflect.set(globalThis, name, original),
  }
}
