import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'
import { burstGate } from './burst-gate.js'
import type { ProbeServer } from './probe-server.js'

/**
 * Small endpoints written for the kit to judge, with no oncely in them: one that runs every
 * request, and one that keeps keys (in memory) and can be told to ignore the payload.
 */
export interface ToyServer {
  readonly url: string
  close(): Promise<void>
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

async function serveToy(server: Server, name: string): Promise<ToyServer> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const untrack = trackOpenHandle(`verify toy server ${name}`)
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`,
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      untrack()
    },
  }
}

/** Runs every request, key or not: the endpoint a team ships before it adds idempotency. */
export function startRunsEveryRequest(probe: ProbeServer): Promise<ToyServer> {
  let next = 0
  const server = createServer((req, res) => {
    void readBody(req).then(() => {
      const key = req.headers['idempotency-key']
      probe.record(typeof key === 'string' ? key : undefined)
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: `ch_${++next}` }))
    })
  })
  return serveToy(server, 'runs every request')
}

const sortedJson = (value: unknown): unknown =>
  Array.isArray(value) ? value.map(sortedJson) : typeof value === 'object' && value !== null ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => [k, sortedJson(v)])) : value

/** One flaw a keyed endpoint can have, for the kit to find. */
export interface KeyedFlaws {
  /** How a payload is compared with the key's first one. (Default: 'meaning', sorted JSON) */
  payload?: 'meaning' | 'bytes' | 'ignored'
  /** Keys belong to the credential (the Authorization header). (Default: true) */
  perCredential?: boolean
  /** A 503 is kept and replayed like a success. (Default: false) */
  keepsServerErrors?: boolean
  /** The 409's Retry-After; null sends none. (Default: '1') */
  retryAfter?: string | null
  /** A replay carries Idempotent-Replayed: true. (Default: true) */
  marksReplays?: boolean
  /** A replay's body is parsed and written again, indented. (Default: false) */
  reserializes?: boolean
}

/** Keys per credential in memory, 409 while running, 5xx not kept, 422 on another payload; each flaw turned on by name. */
export function startKeyedServer(probe: ProbeServer, flaws: KeyedFlaws = {}): Promise<ToyServer> {
  const keys = new Map<string, { running: true } | { running: false; fingerprint: string; status: number; body: string }>()
  const server = createServer()
  const gate = burstGate(server)
  let next = 0
  const replayHeaders = { 'content-type': 'application/json', ...(flaws.marksReplays === false ? {} : { 'idempotent-replayed': 'true' }) }
  server.on('request', (req, res) => {
    void readBody(req).then(async (raw) => {
      const sent = req.headersDistinct['idempotency-key']
      const key = sent?.length === 1 ? sent[0] : undefined
      if (key === undefined || !/^[\x21\x23-\x7e]{1,255}$/.test(key)) return void res.writeHead(400).end('bad key')
      const slot = flaws.perCredential === false ? key : `${req.headers.authorization ?? ''}\n${key}`
      let body: { fail?: boolean }
      try {
        body = JSON.parse(raw.toString('utf8')) as { fail?: boolean }
      } catch {
        return void res.writeHead(400).end('bad json')
      }
      const payload = flaws.payload ?? 'meaning'
      const fingerprint = createHash('sha256').update(payload === 'bytes' ? raw : JSON.stringify(sortedJson(body))).digest('hex')
      const known = keys.get(slot)
      if (known?.running) return void res.writeHead(409, flaws.retryAfter === null ? {} : { 'retry-after': flaws.retryAfter ?? '1' }).end('in progress')
      if (known) {
        if (payload !== 'ignored' && known.fingerprint !== fingerprint) return void res.writeHead(422).end('key reused')
        const replayed = flaws.reserializes ? JSON.stringify(JSON.parse(known.body), null, 1) : known.body
        return void res.writeHead(known.status, replayHeaders).end(replayed)
      }
      keys.set(slot, { running: true })
      probe.record(key)
      if (body.fail === true) {
        if (flaws.keepsServerErrors) keys.set(slot, { running: false, fingerprint, status: 503, body: '{"error":"away"}' })
        else keys.delete(slot)
        return void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"away"}')
      }
      await gate(req.headers)
      const answer = JSON.stringify({ id: `ch_${++next}` })
      keys.set(slot, { running: false, fingerprint, status: 201, body: answer })
      res.writeHead(201, { 'content-type': 'application/json' }).end(answer)
    })
  })
  return serveToy(server, 'keyed')
}
