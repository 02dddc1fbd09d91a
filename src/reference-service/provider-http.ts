import { Pool, errors, type Dispatcher } from 'undici'

/** One answer of the provider, read whole. */
export interface ProviderAnswer {
  status: number
  text: string
}

/** JSON POSTs to the provider over connections kept alive and shared by every caller. */
export interface ProviderHttp {
  /**
   * Sends `body` to `path`. Rejects when the connection fails, when the provider is silent for
   * `timeoutMs`, or when the answer is cut short: then the call may or may not have happened.
   */
  post(path: string, body: string, options: { timeoutMs: number; idempotencyKey?: string | undefined }): Promise<ProviderAnswer>
  /** Closes the kept-alive connections. */
  close(): void
}

/**
 * The provider's connections: an undici `Pool` of at most `maxSockets` kept-alive connections,
 * enough for every request in flight, since a call holds its connection only while the provider
 * answers. A new connection per call costs the API process a handshake and a socket each time,
 * and `fetch` a web-stream pipeline and an `AbortSignal` timer per request (issue 21: 15–22 % of
 * the process). undici over a pool costs about half the CPU of node:http's client on a
 * keep-alive agent (measured alone, 16 calls in flight on loopback: 55–70 against 135–146 µs per
 * call), and the service makes two such calls per fresh charge (the charge and the receipt). Its
 * own timers bound a silent provider: no answer's headers within `timeoutMs`, or a pause as long
 * within its body. They tick every half second, so a call gives up up to about a second after
 * `timeoutMs` (seen: 0.9 s for 200 ms), which the service's timeouts (10 s, 30 s) can spare: no
 * native timer is set and cleared per call.
 */
export function createProviderHttp(baseUrl: string, options: { maxSockets?: number } = {}): ProviderHttp {
  const base = new URL(baseUrl)
  // An idle connection is closed before the provider's own keep-alive timeout (Node's default
  // is 5 s) could close it under a request just sent on it.
  const pool = new Pool(base.origin, { connections: options.maxSockets ?? 64, keepAliveTimeout: 4000, keepAliveMaxTimeout: 4000 })
  // Each path resolved against the base URL once.
  const paths = new Map<string, string>()
  return {
    async post(path, body, { timeoutMs, idempotencyKey }) {
      let resolved = paths.get(path)
      if (resolved === undefined) {
        const url = new URL(path, base)
        resolved = `${url.pathname}${url.search}`
        paths.set(path, resolved)
      }
      const headers: Record<string, string> = { 'content-type': 'application/json' }
      if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey
      try {
        return await dispatched(pool, { origin: base.origin, path: resolved, method: 'POST', headers, body, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
      } catch (error) {
        throw described(error, timeoutMs)
      }
    },
    close() {
      // Closed at once, as the service stops: a call still in flight fails.
      pool.destroy().catch(() => undefined)
    },
  }
}

/**
 * One call on the pool, its answer gathered as it arrives: `pool.request` would give the body as a
 * stream to read, a stream per call and its ticks (issue 21: 3–5 µs of CPU a call of 27–35 once
 * warm, measured alone at 16 calls in flight on loopback, and a fresh charge makes two). The chunks are
 * joined before they are decoded, so a character split between two stays whole.
 */
function dispatched(pool: Pool, options: Dispatcher.DispatchOptions): Promise<ProviderAnswer> {
  return new Promise((resolve, reject) => {
    let status = 0
    let chunks: Buffer[] = []
    pool.dispatch(options, {
      // undici tells its handler kinds apart by this method: without it, it asks for the older kind's.
      onRequestStart() {},
      onResponseStart(_controller, statusCode) {
        // Should undici report a 1xx before the answer, only the last start is the answer's.
        status = statusCode
        chunks = []
      },
      onResponseData(_controller, chunk) {
        chunks.push(chunk)
      },
      onResponseEnd() {
        resolve({ status, text: (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString('utf8') })
      },
      onResponseError(_controller, error) {
        reject(error)
      },
    })
  })
}

/** undici's error, said as the provider's part: silent past the deadline, or an answer cut short. */
function described(error: unknown, timeoutMs: number): unknown {
  if (error instanceof errors.HeadersTimeoutError || error instanceof errors.BodyTimeoutError) {
    return new Error(`the provider did not answer within ${timeoutMs} ms`, { cause: error })
  }
  if (error instanceof errors.SocketError || error instanceof errors.ResponseContentLengthMismatchError) {
    return new Error('the provider closed the connection before its answer was complete', { cause: error })
  }
  return error
}
