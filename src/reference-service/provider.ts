import { createHash, randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * The fake payment provider: a Stripe-shaped charges API kept in memory, run as its own process
 * so that it outlives an API crash and can count what was really charged.
 */
export interface ProviderOptions {
  /** Delay before each charge attempt answers. (Default: 0) */
  latencyMs?: number
  /** For a `cus_flaky…` customer, how many calls per key fail with 503 before one charges. (Default: 1) */
  flakyN?: number
}

export interface ProviderCharge {
  id: string
  object: 'charge'
  amount: number
  currency: string
  customer: string
  status: 'succeeded'
  metadata: Record<string, string>
  created: number
}

interface Answer {
  status: number
  body: string
  /** Set on an answer repeated for a key seen before. */
  replayed?: boolean
}

interface KeyEntry {
  /** Hash of the payload first sent with the key: the same key with another payload is refused. */
  payload: string
  /** Settles once the first call with the key has an answer; later calls get the same one. */
  answer: Promise<Answer>
}

const MAX_BODY_BYTES = 64 * 1024

export interface RunningProvider {
  readonly url: string
  readonly server: Server
  close(): Promise<void>
}

export function createProviderServer(options: ProviderOptions = {}): Server {
  const latencyMs = options.latencyMs ?? 0
  const flakyN = options.flakyN ?? 1
  const charges: ProviderCharge[] = []
  const byKey = new Map<string, KeyEntry>()
  const calls = new Map<string, number>()

  async function charge(payload: ChargePayload): Promise<Answer> {
    if (latencyMs > 0) await sleep(latencyMs)
    if (payload.customer.startsWith('cus_decline')) {
      return json(402, { error: { type: 'card_error', code: 'card_declined', message: 'Your card was declined.' } })
    }
    const created: ProviderCharge = {
      id: `ch_${randomBytes(12).toString('hex')}`,
      object: 'charge',
      amount: payload.amount,
      currency: payload.currency,
      customer: payload.customer,
      status: 'succeeded',
      metadata: payload.metadata,
      created: Math.floor(Date.now() / 1000),
    }
    charges.push(created)
    return json(200, created)
  }

  async function createCharge(request: IncomingMessage): Promise<Answer> {
    const text = await readBody(request)
    if (text === undefined) return error(413, 'invalid_request_error', 'the body is larger than 64 KiB')
    const payload = parsePayload(text)
    if (typeof payload === 'string') return error(400, 'invalid_request_error', payload)
    const key = singleHeader(request.headers['idempotency-key'])
    const hash = createHash('sha256').update(JSON.stringify(payload)).digest('hex')
    const entry = key === undefined ? undefined : byKey.get(key)
    if (entry) {
      if (entry.payload !== hash) {
        return error(400, 'idempotency_error', 'Keys for idempotent requests can only be used with the same parameters they were first used with.')
      }
      const answer = await entry.answer
      return { ...answer, replayed: true }
    }
    const callKey = key ?? ''
    const call = (calls.get(callKey) ?? 0) + 1
    calls.set(callKey, call)
    if (payload.customer.startsWith('cus_flaky') && call <= flakyN) {
      if (latencyMs > 0) await sleep(latencyMs)
      // Fails before charging: nothing is remembered under the key, so a retry charges once.
      return error(503, 'api_error', `the provider is unavailable (flaky call ${call} of ${flakyN})`)
    }
    const answer = charge(payload)
    // Recorded before the first await, so a concurrent call with the same key waits for this one.
    if (key !== undefined) byKey.set(key, { payload: hash, answer })
    return answer
  }

  const messages: ProviderMessage[] = []

  /** A "you were charged" message. Never deduped: the service must not ask twice (at most once). */
  async function sendMessage(request: IncomingMessage): Promise<Answer> {
    const text = await readBody(request)
    if (text === undefined) return error(413, 'invalid_request_error', 'the body is larger than 64 KiB')
    const payload = parseMessage(text)
    if (typeof payload === 'string') return error(400, 'invalid_request_error', payload)
    const message: ProviderMessage = { id: `msg_${randomBytes(12).toString('hex')}`, object: 'message', ...payload, created: Math.floor(Date.now() / 1000) }
    messages.push(message)
    return json(200, message)
  }

  function list(url: URL): Answer {
    const orderId = url.searchParams.get('order_id')
    const data = orderId === null ? charges : charges.filter((c) => c.metadata.order_id === orderId)
    return json(200, { object: 'list', data })
  }

  async function route(request: IncomingMessage): Promise<Answer> {
    const url = new URL(request.url ?? '/', 'http://provider.invalid')
    const method = request.method ?? 'GET'
    if (url.pathname === '/healthz' && method === 'GET') return json(200, { status: 'ok', service: 'oncely-fake-provider', pid: process.pid })
    if (url.pathname === '/v1/charges') {
      if (method === 'POST') return createCharge(request)
      if (method === 'GET') return list(url)
      return error(405, 'invalid_request_error', `${method} is not allowed here`)
    }
    if (url.pathname === '/v1/messages') {
      if (method === 'POST') return sendMessage(request)
      if (method === 'GET') return json(200, { object: 'list', data: messages })
      return error(405, 'invalid_request_error', `${method} is not allowed here`)
    }
    const one = /^\/v1\/charges\/([^/]+)$/.exec(url.pathname)
    if (one && method === 'GET') {
      const found = charges.find((c) => c.id === one[1])
      return found ? json(200, found) : error(404, 'invalid_request_error', 'No such charge')
    }
    return error(404, 'invalid_request_error', 'Unrecognized request URL')
  }

  return createServer((request, response) => {
    route(request).then(
      (answer) => send(response, answer),
      (cause: unknown) => send(response, error(500, 'api_error', cause instanceof Error ? cause.message : String(cause))),
    )
  })
}

/** Starts the provider; `port` 0 picks a free one. Prints nothing: the caller prints the ready line. */
export async function startProvider(options: ProviderOptions & { host?: string; port?: number } = {}): Promise<RunningProvider> {
  const server = createProviderServer(options)
  const host = options.host ?? '127.0.0.1'
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const { port } = server.address() as AddressInfo
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

export interface ProviderMessage {
  id: string
  object: 'message'
  customer: string
  charge: unknown
  created: number
}

function parseMessage(text: string): { customer: string; charge: unknown } | string {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return 'the body is not valid JSON'
  }
  const { customer, charge } = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>
  if (typeof customer !== 'string' || customer.length === 0) return 'customer is required'
  if (charge === undefined) return 'charge is required'
  return { customer, charge }
}

interface ChargePayload {
  amount: number
  currency: string
  customer: string
  metadata: Record<string, string>
}

function parsePayload(text: string): ChargePayload | string {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return 'the body is not valid JSON'
  }
  if (typeof body !== 'object' || body === null) return 'the body must be a JSON object'
  const { amount, currency, customer, metadata = {} } = body as Record<string, unknown>
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) return 'amount must be a positive integer'
  if (typeof currency !== 'string' || currency.length === 0) return 'currency is required'
  if (typeof customer !== 'string' || customer.length === 0) return 'customer is required'
  if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata)) return 'metadata must be an object'
  const entries = Object.entries(metadata as Record<string, unknown>)
  if (entries.some(([, value]) => typeof value !== 'string')) return 'metadata values must be strings'
  return { amount, currency, customer, metadata: Object.fromEntries(entries) as Record<string, string> }
}

function readBody(request: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let tooLarge = false
    request.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size > MAX_BODY_BYTES) tooLarge = true
      else chunks.push(chunk)
    })
    request.on('end', () => resolve(tooLarge ? undefined : Buffer.concat(chunks).toString('utf8')))
    request.on('error', reject)
  })
}

function singleHeader(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}

function json(status: number, value: unknown): Answer {
  return { status, body: JSON.stringify(value) }
}

function error(status: number, type: string, message: string): Answer {
  return json(status, { error: { type, message } })
}

function send(response: ServerResponse, answer: Answer): void {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (answer.replayed) headers['idempotent-replayed'] = 'true'
  if (answer.status === 503) headers['retry-after'] = '1'
  response.writeHead(answer.status, headers).end(answer.body)
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
