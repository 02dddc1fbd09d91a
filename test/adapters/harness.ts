import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { AdapterOptions, IdempotencyContext } from '../../src/adapters/http.js'
import type { Queryable } from '../../src/store/postgres/index.js'

/** What a test route's handler sees, the same in every framework. */
export interface HandlerInput {
  body: unknown
  params: Record<string, string>
  idempotency: IdempotencyContext<Queryable> | undefined
}

/**
 * A complete response, or a body sent in pieces (a stream); with `streamError`, the stream fails
 * with that message after its chunks, the way each framework sees a source that breaks mid-way.
 */
export type HandlerOutput =
  | { status: number; headers?: Record<string, string>; body?: string | Uint8Array }
  | { status: number; headers?: Record<string, string>; stream: string[]; streamError?: string }

export interface TestRoute {
  method: 'GET' | 'POST' | 'PATCH'
  /** A pattern with `:name` params, the same syntax in every framework. */
  path: string
  handler: (input: HandlerInput) => Promise<HandlerOutput>
}

/** The adapter options a test gives; `scope` reads the Authorization header value. */
export type TestOptions = Omit<AdapterOptions<never, Queryable>, 'scope'> & {
  scope?: 'global' | ((authorization: string | undefined) => string | number | undefined)
}

export interface TestRequest {
  method: string
  path: string
  headers?: Record<string, string>
  /** A string is sent as is, an object as JSON. */
  body?: string | object
  /** Aborting it closes the client's side of the request (a real connection where the harness has one). */
  signal?: AbortSignal
}

export interface TestResponse {
  status: number
  headers: Headers
  body: Buffer
}

export interface AppUnderTest {
  request(request: TestRequest): Promise<TestResponse>
  close(): Promise<void>
}

/** One framework: builds an app from the routes, guarded by its adapter. */
export interface AdapterHarness {
  name: string
  start(options: TestOptions, routes: readonly TestRoute[]): Promise<AppUnderTest>
}

export function requestBody(request: TestRequest): string | undefined {
  if (request.body === undefined) return undefined
  return typeof request.body === 'string' ? request.body : JSON.stringify(request.body)
}

export function requestHeaders(request: TestRequest): Record<string, string> {
  return { ...(request.body === undefined ? {} : { 'content-type': 'application/json' }), ...request.headers }
}

/** Adapter options in the framework's terms, given how it reads the Authorization header. */
export function frameworkOptions<Req>(options: TestOptions, authorization: (request: Req) => string | undefined): AdapterOptions<Req, Queryable> {
  const { scope, ...rest } = options
  const resolved = scope === undefined ? undefined : scope === 'global' ? 'global' : (request: Req) => scope(authorization(request))
  return { ...rest, scope: resolved } as AdapterOptions<Req, Queryable>
}

/** Matches a `:param` pattern against a path, for the node:http harness. */
export function matchPath(pattern: string, path: string): Record<string, string> | undefined {
  const want = pattern.split('/')
  const got = path.split('/')
  if (want.length !== got.length) return undefined
  const params: Record<string, string> = {}
  for (const [i, part] of want.entries()) {
    const actual = got[i] ?? ''
    if (part.startsWith(':')) params[part.slice(1)] = decodeURIComponent(actual)
    else if (part !== actual) return undefined
  }
  return params
}

/** Fetches from a server listening on 127.0.0.1:port. */
export async function fetchFrom(port: number, request: TestRequest): Promise<TestResponse> {
  const body = requestBody(request)
  const response = await fetch(`http://127.0.0.1:${port}${request.path}`, {
    method: request.method,
    headers: requestHeaders(request),
    ...(body === undefined ? {} : { body }),
    ...(request.signal === undefined ? {} : { signal: request.signal }),
  })
  return { status: response.status, headers: response.headers, body: Buffer.from(await response.arrayBuffer()) }
}

/** Listens on a free port of 127.0.0.1 and answers the table's requests over real HTTP. */
export async function serveOnFreePort(server: Server): Promise<AppUnderTest> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    request: (request) => fetchFrom(port, request),
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
    },
  }
}

// The suite's store is PostgreSQL: register its transaction type as an application does
// (docs/adapters.md), so `req.idempotency` and `request.idempotency` carry it without a cast.
declare module '../../src/adapters/express.js' {
  interface IdempotencyRegister {
    tx: Queryable
  }
}
