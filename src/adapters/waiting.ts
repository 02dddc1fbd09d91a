import type { BeginInput, Decision, Engine } from '../engine/engine.js'

/** Subscribes `listener` to the client going away before it was answered; returns the unsubscribe. */
export type ClientGone = (listener: () => void) => () => void

/** The node:http response's `close` before it finished: the client closed its connection. */
export function responseClosed(res: { once(event: 'close', listener: () => void): unknown; off(event: 'close', listener: () => void): unknown }): ClientGone {
  return (listener) => {
    res.once('close', listener)
    return () => void res.off('close', listener)
  }
}

/** A fetch `Request`'s signal (Hono): read only when a request waits, as building it may cost. */
export function signalAborted(signal: () => AbortSignal): ClientGone {
  return (listener) => {
    const aborted = signal()
    aborted.addEventListener('abort', listener, { once: true })
    return () => aborted.removeEventListener('abort', listener)
  }
}

/**
 * `engine.begin` for a duplicate that may wait `waitMs` for the first request (issue 23); a
 * client that goes away meanwhile ends the wait, so no read is spent on an answer nobody gets.
 */
export async function beginWaiting<Tx>(engine: Engine<Tx>, input: BeginInput, waitMs: number, clientGone: ClientGone | undefined): Promise<Decision<Tx>> {
  if (waitMs <= 0) return engine.begin(input)
  if (clientGone === undefined) return engine.begin(input, { waitMs })
  const controller = new AbortController()
  const unsubscribe = clientGone(() => controller.abort())
  try {
    return await engine.begin(input, { waitMs, signal: controller.signal })
  } finally {
    unsubscribe()
  }
}
