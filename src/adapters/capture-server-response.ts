import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { HttpAnswer } from './answers.js'
import type { CapturedResponse, GuardedExecution } from './http.js'

type Callback = (error?: Error | null) => void

/**
 * Holds a `node:http` response (Express's too) until its outcome is settled: `writeHead` and
 * `end` are recorded instead of sent, a `write` before `end` marks the response as streamed,
 * and the real `end` runs once `guard.settle` has stored the response or chosen a replacement.
 */
export function captureServerResponse<Tx>(res: ServerResponse, guard: GuardedExecution<Tx>): void {
  const original = { write: res.write.bind(res), end: res.end.bind(res), writeHead: res.writeHead.bind(res) }
  // Headers set before the handler ran (CORS, request ids) survive a replacement answer.
  const earlier = new Set(res.getHeaderNames())
  let streamed = false
  let ended = false

  res.writeHead = function writeHead(statusCode: number, ...rest: unknown[]) {
    res.statusCode = statusCode
    for (const arg of rest) {
      if (typeof arg === 'string') res.statusMessage = arg
      else if (Array.isArray(arg)) for (let i = 0; i + 1 < arg.length; i += 2) res.setHeader(String(arg[i]), String(arg[i + 1]))
      else if (typeof arg === 'object' && arg !== null) setHeaders(res, arg as OutgoingHttpHeaders)
    }
    return res
  }

  res.write = function write(_chunk: unknown, ...rest: unknown[]) {
    // A body sent in pieces is a stream: it is refused at end (docs/adapters.md).
    streamed = true
    const callback = rest.find((arg): arg is Callback => typeof arg === 'function')
    if (callback) process.nextTick(callback)
    return true
  } as ServerResponse['write']

  res.end = function end(...args: unknown[]) {
    if (ended) return res
    ended = true
    const callback = args.find((arg): arg is Callback => typeof arg === 'function')
    const chunk = typeof args[0] === 'function' ? undefined : args[0]
    const encoding = typeof args[1] === 'string' ? (args[1] as BufferEncoding) : undefined
    const body = toBytes(chunk, encoding)
    Object.assign(res, original)
    const captured: CapturedResponse = streamed
      ? { kind: 'streamed', status: res.statusCode }
      : { kind: 'response', status: res.statusCode, headers: Object.entries(res.getHeaders()), body }
    void guard.settle(captured).then((replacement) => {
      if (replacement) sendAnswer(res, replacement, (name) => !earlier.has(name), callback)
      else res.end(body, callback)
    })
    return res
  } as ServerResponse['end']
}

/** Sends an answer on a response whose headers are not yet sent, first removing the headers `drop` names. */
export function sendAnswer(res: ServerResponse, answer: HttpAnswer, drop: (name: string) => boolean = () => false, callback?: Callback): void {
  for (const name of res.getHeaderNames()) if (drop(name)) res.removeHeader(name)
  res.statusCode = answer.status
  const grouped = new Map<string, string[]>()
  for (const [name, value] of answer.headers) grouped.set(name, [...(grouped.get(name) ?? []), value])
  for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? (values[0] as string) : values)
  res.setHeader('content-length', answer.body.byteLength)
  res.end(answer.body, callback)
}

function setHeaders(res: ServerResponse, headers: OutgoingHttpHeaders): void {
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value)
}

function toBytes(chunk: unknown, encoding: BufferEncoding | undefined): Uint8Array {
  if (chunk === undefined || chunk === null) return new Uint8Array(0)
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding ?? 'utf8')
  if (chunk instanceof Uint8Array) return chunk
  throw new TypeError('res.end(chunk): the chunk must be a string, a Buffer or a Uint8Array')
}
