/**
 * The lean durable baseline (issue 21): the same durable work as the reference service's charge,
 * written as tight as it goes without a library, so the bench can say what that work costs on
 * this machine. node:http, `pg` with named statements, the provider over a keep-alive agent.
 * A fresh charge: the claim committed in one statement, the provider charge and the receipt,
 * then one statement that completes the key only while this claim still holds it (its token)
 * and writes the stored answer, the charge row and the outbox event together. Two round trips
 * to PostgreSQL, two commits. A replay or a 422 is the claim statement alone.
 *
 * What it leaves out, so it is a floor and not a rival: no lease renewal, take-over, handler
 * deadline, step record, wait, retry of a lost answer, relay, metrics or logs; the body is hashed
 * as sent, not canonicalized; a claim left by a crash stays until someone deletes it.
 *
 *   node --import tsx bench/baselines/lean-durable.ts --provider-url URL --database-url URL [--schema NAME] [--port 0]
 *
 * Prints `listening on http://127.0.0.1:PORT` once ready; stops on SIGTERM or SIGINT.
 */
import { createHash, randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { createProviderCaller } from './provider-call.js'

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    'provider-url': { type: 'string' },
    'database-url': { type: 'string' },
    schema: { type: 'string', default: 'bench_lean' },
  },
})
if (!values['provider-url'] || !values['database-url']) throw new Error('--provider-url and --database-url are required')
if (!/^[a-z_][a-z0-9_]*$/.test(values.schema)) throw new Error(`--schema must be a plain lower-case identifier, not ${values.schema}`)
const schema = values.schema
const provider = createProviderCaller(values['provider-url'], 10_000)
// The reference service's pool size.
const pool = new pg.Pool({ connectionString: values['database-url'], max: 20, keepAlive: true })

await pool.query(`
CREATE SCHEMA IF NOT EXISTS ${schema};
CREATE TABLE IF NOT EXISTS ${schema}.keys (
  scope text NOT NULL, key text NOT NULL, fingerprint text NOT NULL, status text NOT NULL, token uuid NOT NULL,
  response_status integer, response_body text, created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (scope, key));
CREATE TABLE IF NOT EXISTS ${schema}.charges (
  id text PRIMARY KEY, user_id text NOT NULL, amount bigint NOT NULL, currency text NOT NULL, customer text NOT NULL,
  provider_charge_id text NOT NULL, idempotency_key text NOT NULL, created bigint NOT NULL);
CREATE TABLE IF NOT EXISTS ${schema}.outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());`)

/**
 * Claims the key, or reads the row that holds it: one statement, one commit. A row committed by
 * another claim after this statement's snapshot is not seen by its SELECT half: no row, read again.
 */
const CLAIM = {
  name: 'lean-claim',
  text: `WITH inserted AS (
    INSERT INTO ${schema}.keys (scope, key, fingerprint, status, token) VALUES ($1, $2, $3, 'running', $4)
    ON CONFLICT (scope, key) DO NOTHING RETURNING true AS fresh, status, fingerprint, response_status, response_body)
  SELECT * FROM inserted
  UNION ALL
  SELECT false, status, fingerprint, response_status, response_body FROM ${schema}.keys
  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM inserted)`,
}

/** Completes the key while this claim holds it, with the charge row and the event, or writes nothing. */
const COMPLETE = {
  name: 'lean-complete',
  text: `WITH done AS (
    UPDATE ${schema}.keys SET status = 'completed', response_status = 201, response_body = $4
    WHERE scope = $1 AND key = $2 AND token = $3 AND status = 'running' RETURNING 1),
  charge AS (
    INSERT INTO ${schema}.charges (id, user_id, amount, currency, customer, provider_charge_id, idempotency_key, created)
    SELECT $5, $1, $6::bigint, $7, $8, $9, $2, $10::bigint FROM done),
  event AS (INSERT INTO ${schema}.outbox (topic, payload) SELECT 'charge.succeeded', $4 FROM done)
  SELECT count(*)::int AS completed FROM done`,
}

const RELEASE = { name: 'lean-release', text: `DELETE FROM ${schema}.keys WHERE scope = $1 AND key = $2 AND token = $3 AND status = 'running'` }

interface ClaimRow {
  fresh: boolean
  status: string
  fingerprint: string
  response_status: number | null
  response_body: string | null
}

function answer(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

function problem(res: ServerResponse, status: number, title: string): void {
  answer(res, status, JSON.stringify({ type: 'about:blank', title, status }))
}

async function claim(scope: string, key: string, fingerprint: string, token: string): Promise<ClaimRow> {
  for (;;) {
    const { rows } = await pool.query<ClaimRow>({ ...CLAIM, values: [scope, key, fingerprint, token] })
    if (rows[0]) return rows[0]
  }
}

async function charge(req: IncomingMessage, res: ServerResponse, text: string): Promise<void> {
  const auth = /^Bearer +demo_([0-9]{1,15})$/i.exec(req.headers.authorization?.trim() ?? '')
  if (!auth?.[1] || Number(auth[1]) <= 0) return problem(res, 401, 'Unauthorized')
  const scope = String(Number(auth[1]))
  const key = req.headers['idempotency-key']
  if (typeof key !== 'string' || key.length === 0 || key.length > 255) return problem(res, 400, 'Idempotency-Key required')
  let input: { amount?: unknown; currency?: unknown; customer?: unknown }
  try {
    input = JSON.parse(text) as typeof input
  } catch {
    return problem(res, 400, 'Invalid JSON')
  }
  const { amount, currency, customer } = input
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0 || typeof currency !== 'string' || !/^[a-z]{3}$/.test(currency) || typeof customer !== 'string' || customer.length === 0) {
    return problem(res, 400, 'Invalid charge')
  }
  const fingerprint = createHash('sha256').update(text).digest('base64url')
  const token = randomUUID()
  const row = await claim(scope, key, fingerprint, token)
  if (!row.fresh) {
    if (row.fingerprint !== fingerprint) return problem(res, 422, 'Idempotency-Key reused with another request')
    if (row.status !== 'completed' || row.response_status === null || row.response_body === null) return problem(res, 409, 'A request with this Idempotency-Key is in flight')
    return answer(res, row.response_status, row.response_body)
  }
  try {
    const made = await provider.charge({ amount, currency, customer }, `${scope}:${key}`)
    const view = { id: `ch_${made.id.slice(3)}`, object: 'charge', amount, currency, customer, status: 'succeeded', provider_charge: made.id, created: made.created }
    const body = JSON.stringify(view)
    await provider.receipt({ customer, charge: view })
    const { rows } = await pool.query<{ completed: number }>({ ...COMPLETE, values: [scope, key, token, body, view.id, amount, currency, customer, made.id, made.created] })
    if (rows[0]?.completed !== 1) return problem(res, 409, 'The claim was lost before it completed')
    answer(res, 201, body)
  } catch (error) {
    await pool.query({ ...RELEASE, values: [scope, key, token] }).catch(() => undefined)
    problem(res, 502, (error as Error).message)
  }
}

const server = createServer((req, res) => {
  let text = ''
  req.setEncoding('utf8')
  req.on('data', (chunk: string) => (text += chunk))
  req.on('end', () => {
    if (req.method !== 'POST' || req.url !== '/v1/charges') return problem(res, 404, 'Not Found')
    charge(req, res, text).catch((error: unknown) => {
      if (!res.headersSent) problem(res, 500, (error as Error).message)
    })
  })
})
server.keepAliveTimeout = 65_000
server.listen(Number(values.port), '127.0.0.1', () => {
  process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`)
})
const stop = () => {
  server.close()
  server.closeIdleConnections()
  provider.close()
  void pool.end()
}
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
