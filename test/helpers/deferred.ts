/** A promise with its resolve and reject exposed: to hold a handler at a point and let it go. */
export interface Deferred<T> {
  promise: Promise<T>
  resolve(value: T): void
  reject(error: unknown): void
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/** Resolves once `count` parties have arrived; each `arrive()` waits for all of them. */
export function latch(count: number): { arrive(): Promise<void> } {
  const all = deferred()
  let arrived = 0
  return {
    arrive() {
      arrived++
      if (arrived >= count) all.resolve()
      return all.promise
    },
  }
}
