import type { HttpAnswer } from './answers.js'
import { toBytes } from './body.js'
import type { CapturedResponse } from './request-context.js'
import type { HeaderValue } from './stored-headers.js'

/** Ends a guarded request with what the handler answered; never rejects (a `GuardedExecution`). */
export interface StreamSettler {
  settle(captured: CapturedResponse): Promise<HttpAnswer | null>
  readonly logFields?: Readonly<Record<string, unknown>>
}

/** The part of the adapter's logger a recorder writes to. */
export interface StreamLog {
  error(fields: Record<string, unknown>, message: string): void
}

/**
 * The record of one streamed response while it passes through to the client (issue 23): a copy
 * of its body, kept while it fits in `maxStoredBodyBytes` and dropped past it, and the one
 * settlement of its outcome. Once the stream has started, the handler has run: its end stores
 * the response whole (or, past the bound, the result-unavailable problem), and a stream cut by
 * an error or by the client going away is recorded as result-unavailable too, never released.
 */
export class StreamRecorder {
  readonly #guard: StreamSettler
  readonly #log: StreamLog
  readonly #status: number
  readonly #headers: Array<readonly [string, HeaderValue]>
  readonly #limit: number
  #chunks: Uint8Array[] = []
  #bytes = 0
  #done = false

  constructor(guard: StreamSettler, log: StreamLog, status: number, headers: Iterable<readonly [string, HeaderValue]>, maxStoredBodyBytes: number) {
    this.#guard = guard
    this.#log = log
    this.#status = status
    // Copied now: what the handler changes after the status line went out never reached the client.
    this.#headers = [...headers]
    this.#limit = maxStoredBodyBytes
  }

  /** Whether the outcome is settled (or being settled): later chunks are passed on, not copied. */
  get done(): boolean {
    return this.#done
  }

  /** Copies a chunk on its way to the client, until the copy would pass the bound. */
  add(chunk: unknown, encoding?: BufferEncoding): void {
    if (this.#done) return
    const bytes = toBytes(chunk, encoding)
    this.#bytes += bytes.byteLength
    if (this.#bytes > this.#limit) this.#chunks = []
    // A copy, not a view: the caller may reuse its buffer once it is written.
    else this.#chunks.push(Uint8Array.prototype.slice.call(bytes))
  }

  /**
   * The handler ended the stream: stores it. Resolves to `true` when the end may be sent, `false`
   * when the outcome was not recorded (a take-over, the database away) and the client already has
   * the body's start: the caller then cuts the connection, so the client cannot take an unrecorded
   * response for a complete one and retries with the same key.
   */
  async end(): Promise<boolean> {
    if (this.#done) return true
    this.#done = true
    const status = this.#status
    const captured: CapturedResponse =
      this.#bytes > this.#limit
        ? { kind: 'unstorable', status, reason: `the ${status} response streamed ${this.#bytes} bytes, more than maxStoredBodyBytes (${this.#limit}), so it was not stored` }
        : { kind: 'response', status, headers: this.#headers, body: Buffer.concat(this.#chunks) }
    this.#chunks = []
    const replacement = await this.#guard.settle(captured)
    if (replacement === null) return true
    this.#log.error({ ...this.#guard.logFields, status: replacement.status, ...(replacement.instance === undefined ? {} : { instance: replacement.instance }) }, `oncely: the streamed ${status} response could not be recorded (${replacement.status}); its connection is cut so the client retries with the same key`)
    return false
  }

  /** The stream was cut after it started: the handler ran, so its outcome is recorded as result-unavailable. */
  cut(why: string): Promise<void> {
    if (this.#done) return Promise.resolve()
    this.#done = true
    this.#chunks = []
    const reason = `the ${this.#status} response was cut after ${this.#bytes} bytes of its streamed body (${why}), so it was not stored`
    return this.#guard.settle({ kind: 'unstorable', status: this.#status, reason }).then(() => undefined)
  }
}

/** The short form of a stream's error, for the reason stored with a cut response. */
export function describeStreamError(error: unknown): string {
  return error instanceof Error ? `its stream failed: ${error.message}` : 'its stream failed'
}

/**
 * Passes a web `ReadableStream` body through `recorder` (Hono's responses, Fastify's web
 * payloads). The first chunk is read before the response starts: a stream that fails before it
 * has sent the client nothing, and resolves `{ ok: false }` to be handled as a throw. After it,
 * chunks go to the client as they come, copied on the way; the close waits for the outcome to be
 * stored, and a failure or a cancel (the client gone) cuts it.
 */
export async function passThroughWeb(source: ReadableStream<unknown>, recorder: StreamRecorder): Promise<{ ok: true; stream: ReadableStream<Uint8Array> } | { ok: false; error: unknown }> {
  const reader = source.getReader()
  let pending: { done: boolean; value?: unknown } | undefined
  try {
    pending = await reader.read()
  } catch (error) {
    return { ok: false, error }
  }
  const stream = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let result = pending
        pending = undefined
        if (result === undefined) {
          try {
            result = await reader.read()
          } catch (error) {
            await recorder.cut(describeStreamError(error))
            return controller.error(error)
          }
        }
        if (!result.done) {
          recorder.add(result.value)
          return controller.enqueue(result.value as Uint8Array)
        }
        if (await recorder.end()) controller.close()
        else controller.error(new Error('oncely: the outcome of this streamed response was not recorded'))
      },
      async cancel(reason) {
        await recorder.cut('the client went away')
        await reader.cancel(reason)
      },
    },
    // Read from the handler only as fast as the client takes it.
    { highWaterMark: 0 },
  )
  return { ok: true, stream }
}
