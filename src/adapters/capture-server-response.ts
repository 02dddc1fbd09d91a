import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { Logger, LogFields } from '../logger.js'
import type { HttpAnswer } from './answers.js'
import { toBytes } from './body.js'
import { keyTtlHeaders } from './key-ttl.js'
import type { CapturedResponse } from './request-context.js'
import { describeStreamError, StreamRecorder } from './streamed-body.js'

type Callback = (error?: Error | null) => void
type End = (chunk: Uint8Array, callback?: Callback) => void

/** Decides what to send for a captured response: a replacement, or `null` to send it as it is. Never rejects. */
export interface ResponseSettler {
  settle(captured: CapturedResponse): Promise<HttpAnswer | null>
  /** The fields of the request's log lines (route, scope, hashed key). */
  readonly logFields?: Readonly<LogFields>
  /** How much of a streamed body is copied for the record. (Default: 0, a streamed body is never stored whole) */
  readonly maxStoredBodyBytes?: number
}

/**
 * Holds a `node:http` response (Express's too) until its outcome is settled: `writeHead`,
 * `flushHeaders` and `end` are recorded instead of sent, and the first answer alone goes on the
 * wire, as it was stored, once `guard.settle` has stored it or chosen a replacement. A second
 * answer is dropped. A `write` before `end` starts a streamed response (issue 23): the status
 * line and each chunk go out as written, copied for the record by a `StreamRecorder`, and only
 * the end waits for the outcome. Returns what to call when the handler throws: a throw after
 * the stream started cuts it, and the handler is not run again.
 *
 * The methods put on `res` are bound functions of one `HeldResponse`, not closures made per
 * request: V8's young collections kept a closure stored on an object, and all it reached (the
 * response, the request, the claim), until the next full collection, so every guarded request
 * was promoted to the old generation (issue 21).
 */
export function captureServerResponse(res: ServerResponse, guard: ResponseSettler, log: Logger): (error: unknown) => Promise<void> {
  const held = new HeldResponse(res, guard, log)
  res.writeHead = heldWriteHead.bind(held)
  // Issue 8 path 12: flushed headers would leave no way to send a replacement answer.
  res.flushHeaders = flushNothing
  res.write = heldWrite.bind(held) as ServerResponse['write']
  res.end = heldEnd.bind(held) as ServerResponse['end']
  return async (error) => held.thrown(error)
}

function flushNothing(): void {}

function heldWriteHead(this: HeldResponse, statusCode: number, ...rest: unknown[]): ServerResponse {
  return this.writeHead(statusCode, rest)
}

function heldWrite(this: HeldResponse, chunk: unknown, ...rest: unknown[]): boolean {
  return this.write(chunk, rest)
}

function heldEnd(this: HeldResponse, ...args: unknown[]): ServerResponse {
  return this.end(args)
}

/** One response held by `captureServerResponse`, and what it has seen of the handler's answer. */
class HeldResponse {
  readonly #res: ServerResponse
  readonly #guard: ResponseSettler
  readonly #log: Logger
  // Node's own methods, called on `res` with `Reflect.apply` when used rather than bound ahead:
  // four more bound functions a request were a cost of every request (issue 21).
  readonly #original: Pick<ServerResponse, 'write' | 'end' | 'writeHead' | 'flushHeaders'>
  // Headers set before the handler ran (CORS, request ids) survive a replacement answer.
  readonly #earlier: string[]
  #recorder: StreamRecorder | undefined
  #ended = false
  // Ended by the connection closing or the handler throwing mid-stream, not by the handler's end.
  #cut = false

  constructor(res: ServerResponse, guard: ResponseSettler, log: Logger) {
    this.#res = res
    this.#guard = guard
    this.#log = log
    // eslint-disable-next-line @typescript-eslint/unbound-method -- each is called on `res` only
    this.#original = { write: res.write, end: res.end, writeHead: res.writeHead, flushHeaders: res.flushHeaders }
    this.#earlier = res.getHeaderNames()
  }

  /** The path without its query string, which may carry a token. */
  #fields(): Readonly<LogFields> {
    const res = this.#res
    return this.#guard.logFields ?? { route: `${res.req.method ?? ''} ${(res.req.url ?? '').split('?')[0] ?? ''}` }
  }

  #secondAnswer(): void {
    this.#log.warn(this.#fields(), 'oncely: the handler answered twice; only its first answer is sent and stored')
  }

  #cutBy(why: string): Promise<void> {
    if (this.#ended || this.#recorder === undefined) return Promise.resolve()
    this.#ended = true
    this.#cut = true
    return this.#recorder.cut(why)
  }

  #restoreHead(): void {
    this.#res.writeHead = this.#original.writeHead
    this.#res.flushHeaders = this.#original.flushHeaders
  }

  #startStream(): StreamRecorder {
    const res = this.#res
    // The status line goes out with the first chunk: headers set later never reach the client.
    this.#restoreHead()
    const started = new StreamRecorder(this.#guard, this.#log, res.statusCode, Object.entries(res.getHeaders()), this.#guard.maxStoredBodyBytes ?? 0)
    res.once('close', () => {
      const errored = (res as { errored?: unknown }).errored
      void this.#cutBy(errored ? describeStreamError(errored) : 'the connection closed before the handler ended it')
    })
    this.#recorder = started
    return started
  }

  writeHead(statusCode: number, rest: unknown[]): ServerResponse {
    const res = this.#res
    if (this.#ended) return res
    res.statusCode = statusCode
    for (const arg of rest) {
      if (typeof arg === 'string') res.statusMessage = arg
      else if (Array.isArray(arg)) for (let i = 0; i + 1 < arg.length; i += 2) res.setHeader(String(arg[i]), String(arg[i + 1]))
      else if (typeof arg === 'object' && arg !== null) setHeaders(res, arg as OutgoingHttpHeaders)
    }
    return res
  }

  write(chunk: unknown, rest: unknown[]): boolean {
    if (this.#ended) return false
    ;(this.#recorder ?? this.#startStream()).add(chunk, typeof rest[0] === 'string' ? (rest[0] as BufferEncoding) : undefined)
    // The real return value, so a piping source waits for `drain` as it would without oncely.
    return Reflect.apply(this.#original.write, this.#res, [chunk, ...rest]) as boolean
  }

  end(args: unknown[]): ServerResponse {
    const res = this.#res
    const original = this.#original
    // Issue 8 path 9: the wire and the record must agree, so only the first answer counts.
    if (this.#ended) {
      if (!this.#cut) this.#secondAnswer()
      return res
    }
    this.#ended = true
    const callback = args.find((arg): arg is Callback => typeof arg === 'function')
    const chunk = typeof args[0] === 'function' ? undefined : args[0]
    const encoding = typeof args[1] === 'string' ? (args[1] as BufferEncoding) : undefined
    const recorder = this.#recorder
    if (recorder !== undefined) {
      recorder.add(chunk, encoding)
      // The last chunk and the end wait for the record; an unrecorded outcome cuts the connection.
      void recorder.end().then((recorded) => (recorded ? void Reflect.apply(original.end, res, args) : res.destroy()))
      return res
    }
    const body = toBytes(chunk, encoding)
    const status = res.statusCode
    const statusMessage = res.statusMessage
    const headers = res.getHeaders()
    const captured: CapturedResponse = { kind: 'response', status, headers: Object.entries(headers), body }
    void this.#guard.settle(captured).then((replacement) => {
      this.#restoreHead()
      try {
        if (replacement) return sendAnswer(res, replacement, (name) => !this.#earlier.includes(name), callback, (chunk, done) => void Reflect.apply(original.end, res, [chunk, done]))
        // Whatever the handler changed after its first answer is undone: the wire gets what was
        // stored. A header still holding the value captured (the same value: `getHeaders` copies
        // the record, not the values) is left as it is, not validated and set again.
        for (const name of res.getHeaderNames()) if (!Object.hasOwn(headers, name)) res.removeHeader(name)
        for (const [name, value] of Object.entries(headers)) if (value !== undefined && res.getHeader(name) !== value) res.setHeader(name, value)
        res.statusCode = status
        res.statusMessage = statusMessage
        Reflect.apply(original.end, res, [body, callback])
      } catch (error) {
        this.#log.error(this.#fields(), `oncely: the answer could not be sent; the connection is closed: ${String(error)}`)
        res.destroy()
      }
    })
    return res
  }

  async thrown(error: unknown): Promise<void> {
    if (this.#recorder === undefined) return void (await this.#guard.settle({ kind: 'thrown', error }))
    if (this.#ended) return
    await this.#cutBy(`the handler threw: ${error instanceof Error ? error.message : String(error)}`)
    // Whatever answers the error next (Nest's filter ends a started response) must not make the
    // cut body look whole to the client.
    this.#res.destroy()
  }
}

/** Sets `Idempotency-Key-TTL` on a response of a guarded route before its handler runs (none when not advertised). */
export function setKeyTtl(res: ServerResponse, keyTtlSeconds: number | undefined): void {
  for (const [name, value] of keyTtlHeaders(keyTtlSeconds)) res.setHeader(name, value)
}

/** Sends an answer on a response whose headers are not yet sent, first removing the headers `drop` names. */
export function sendAnswer(res: ServerResponse, answer: HttpAnswer, drop: (name: string) => boolean = () => false, callback?: Callback, end?: End): void {
  for (const name of res.getHeaderNames()) if (drop(name)) res.removeHeader(name)
  res.statusCode = answer.status
  const grouped = new Map<string, string[]>()
  for (const [name, value] of answer.headers) grouped.set(name, [...(grouped.get(name) ?? []), value])
  for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? (values[0] as string) : values)
  res.setHeader('content-length', answer.body.byteLength)
  if (end) end(answer.body, callback)
  else res.end(answer.body, callback)
}

function setHeaders(res: ServerResponse, headers: OutgoingHttpHeaders): void {
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value)
}
