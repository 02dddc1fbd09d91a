import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { DEFAULT_STALE_AFTER_MS } from '../../engine/options.js'
import { invalid, invalidHidden, positiveInteger } from '../../option-validation.js'
import type { AdminDatabase } from '../admin-database.js'
import { keyStats } from '../key-stats.js'
import { inspectKey, listKeys } from '../keys.js'
import { resolveLogger, type LogOption } from '../logger.js'
import type { ReconcileReport } from '../reconciler.js'
import { releaseKey, type EvictableCache } from '../release-key.js'
import { consolePage, loginPage } from './console-page.js'
import { CONSOLE_SCRIPT } from './console-script.js'

export interface ConsoleOptions {
  /** Pool and schema of the store. (Default: none, required) */
  database: AdminDatabase
  /** The engine's stale threshold, to tell running claims from stuck ones. (Default: 90000) */
  staleAfterMs?: number
  /** Where the page is mounted. (Default: `/console`) */
  basePath?: string
  /**
   * Required from every visitor when set: `Authorization: Bearer <token>`, or the login form,
   * which sets an HttpOnly, SameSite=Strict cookie. Without it the console answers only
   * requests addressed to a loopback host name. (Default: none)
   */
  token?: string | undefined
  /** True when the server listens on a non-loopback interface: the console is then refused unless `token` is set. (Default: false) */
  exposed?: boolean
  /** Request totals by outcome, for the live rates (e.g. read from the metrics registry). (Default: none) */
  outcomeTotals?: () => Promise<Record<string, number>>
  /** Runs the reconciler once, for the page's button. (Default: none, the button is hidden) */
  reconcile?: () => Promise<ReconcileReport[]>
  /** Where audit lines go: a pino-style logger or a line function. (Default: `console.warn`) */
  log?: LogOption
  /**
   * The cache in front of the store (such as the Redis cache), evicted when the page releases a
   * key, so a released key never replays a cached answer. (Default: none)
   */
  cache?: EvictableCache
}

export interface OperatorConsole {
  /** Answers a request whose path is under `basePath`; a fetch-style handler. */
  fetch(request: Request): Promise<Response>
  readonly basePath: string
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]', '::1'])
const COOKIE = 'oncely_console'

/**
 * The operators' page: live rates by outcome, running and stuck claims with their ages, search
 * by user and key, a key's details, release and reconcile buttons. It shows every user's stored
 * responses, so every change is a POST carrying the page's CSRF token from the page's own origin,
 * and it is served to a non-loopback host only with a token.
 *
 * @example
 * ```ts
 * import { createConsole } from 'oncely'
 * const operatorConsole = createConsole({ database: { pool }, token: process.env.CONSOLE_TOKEN })
 * app.all('/console/*', (c) => operatorConsole.fetch(c.req.raw))
 * ```
 */
export function createConsole(options: ConsoleOptions): OperatorConsole {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const basePath = (options.basePath ?? '/console').replace(/\/+$/, '')
  if (!basePath.startsWith('/')) throw invalid('basePath', 'must start with /', options.basePath)
  const token = options.token === undefined || options.token === '' ? undefined : options.token
  if (token !== undefined && token.length < 16) throw invalidHidden('token', 'must be at least 16 characters', `${token.length} characters (not shown)`)
  const log = resolveLogger(options.log)
  const database = options.database
  const csrf = randomBytes(24).toString('base64url')
  const cookieValue = token === undefined ? undefined : createHmac('sha256', token).update('oncely console session').digest('base64url')

  const authorized = (request: Request): boolean => {
    if (token === undefined) return true
    const bearer = /^Bearer (.+)$/.exec(request.headers.get('authorization') ?? '')?.[1]
    if (bearer !== undefined && same(bearer, token)) return true
    const cookie = readCookie(request.headers.get('cookie'), COOKIE)
    return cookie !== undefined && cookieValue !== undefined && same(cookie, cookieValue)
  }

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url)
    const path = url.pathname.slice(basePath.length) || '/'
    if (options.exposed === true && token === undefined) {
      return problem(404, 'the console is not served on a non-loopback host without CONSOLE_TOKEN')
    }
    // Without a token, only a loopback host name: a DNS-rebound name could otherwise read the page.
    if (token === undefined && !LOOPBACK_HOSTS.has(hostName(request))) return problem(403, 'the console answers only a loopback host name unless a token is set')
    if (request.method === 'POST' && path === '/login' && token !== undefined) return login(request)
    if (!authorized(request)) {
      return request.method === 'GET' && path === '/' ? html(loginPage(basePath), 401) : problem(401, 'send Authorization: Bearer <CONSOLE_TOKEN>, or log in')
    }
    if (request.method === 'GET') {
      if (path === '/') return html(consolePage({ basePath, csrf, canReconcile: options.reconcile !== undefined }))
      if (path === '/console.js') return new Response(CONSOLE_SCRIPT, { headers: { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-store' } })
      if (path === '/api/overview') return json(await overview())
      if (path === '/api/keys') return json(await search(url.searchParams))
      return problem(404, `no console page ${path}`)
    }
    if (request.method !== 'POST') return problem(405, `${request.method} is not allowed here`)
    const refusal = crossSiteRefusal(request, csrf)
    if (refusal !== undefined) return problem(403, refusal)
    const body = (await request.json().catch(() => ({}))) as { user?: unknown; key?: unknown; force?: unknown }
    if (path === '/api/release') {
      if (typeof body.user !== 'string' || typeof body.key !== 'string') return problem(400, 'send JSON { "user": "…", "key": "…" }')
      const result = await releaseKey(database, { scope: body.user, key: body.key, force: body.force === true, staleAfterMs, actor: `console ${request.headers.get('x-forwarded-for') ?? 'local'}`, log, ...(options.cache === undefined ? {} : { cache: options.cache }) })
      return json(result, result.released ? 200 : 409)
    }
    if (path === '/api/reconcile') {
      if (!options.reconcile) return problem(404, 'no reconciler is configured for this console')
      log.warn({ audit: 'reconcile', actor: 'console' }, 'reconcile run requested from the console')
      return json(await options.reconcile())
    }
    return problem(404, `no console action ${path}`)
  }

  async function overview() {
    const [stats, stuck, running, outcomes] = await Promise.all([
      keyStats(database, { staleAfterMs }),
      listKeys(database, { stuck: true, staleAfterMs, limit: 50 }),
      listKeys(database, { staleAfterMs, limit: 50 }).then((keys) => keys.filter((key) => key.state === 'running')),
      options.outcomeTotals?.().catch(() => undefined),
    ])
    return { at: Date.now(), staleAfterMs, stats, stuck, running, outcomes: outcomes ?? null }
  }

  async function search(params: URLSearchParams) {
    const user = params.get('user') || undefined
    const key = params.get('key') || undefined
    if (user !== undefined && key !== undefined) return { key: (await inspectKey(database, { scope: user, key, staleAfterMs })) ?? null }
    return { keys: await listKeys(database, { staleAfterMs, limit: 100, ...(user === undefined ? {} : { scope: user }) }) }
  }

  async function login(request: Request): Promise<Response> {
    const refusal = crossSiteRefusal(request, undefined)
    if (refusal !== undefined) return problem(403, refusal)
    // eslint-disable-next-line @typescript-eslint/no-deprecated -- the login page posts one urlencoded field; the deprecation is about multipart bodies
    const form = await request.formData().catch(() => undefined)
    const given = form?.get('token')
    if (typeof given !== 'string' || token === undefined || !same(given, token)) return html(loginPage(basePath, 'wrong token'), 401)
    return new Response(null, {
      status: 303,
      headers: { location: `${basePath}/`, 'set-cookie': `${COOKIE}=${cookieValue}; Path=${basePath}; HttpOnly; SameSite=Strict` },
    })
  }

  return Object.freeze({
    basePath,
    async fetch(request: Request) {
      try {
        return await route(request)
      } catch (error) {
        log.error({ error: error instanceof Error ? error.message : String(error) }, 'console request failed')
        return problem(503, 'the console could not read the database; try again')
      }
    },
  })
}

/**
 * A change must come from the page itself: its Origin (when the browser sends one, and every
 * current browser does on POST) is the console's own, and, for API calls, it carries the CSRF
 * token only the page can read. Returns why a request is refused, or undefined.
 */
function crossSiteRefusal(request: Request, csrf: string | undefined): string | undefined {
  const origin = request.headers.get('origin')
  const own = new URL(request.url).origin
  if (origin !== null && origin !== own && origin !== `${new URL(request.url).protocol}//${request.headers.get('host') ?? ''}`) return `a change from another origin (${origin}) is refused`
  const site = request.headers.get('sec-fetch-site')
  if (site !== null && site !== 'same-origin' && site !== 'none') return 'a cross-site change is refused'
  if (csrf !== undefined && !same(request.headers.get('x-csrf-token') ?? '', csrf)) return 'the CSRF token is missing or wrong: reload the console'
  return undefined
}

function hostName(request: Request): string {
  const host = request.headers.get('host') ?? new URL(request.url).host
  return host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : (host.split(':')[0] ?? '')
}

function same(a: string, b: string): boolean {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && timingSafeEqual(left, right)
}

function readCookie(header: string | null, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=')
    if (key === name) return value.join('=')
  }
  return undefined
}

const SECURITY_HEADERS = {
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
}

function html(body: string, status = 200): Response {
  return new Response(body, { status, headers: { 'content-type': 'text/html; charset=utf-8', ...SECURITY_HEADERS } })
}

function json(value: unknown, status = 200): Response {
  return new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store' } })
}

function problem(status: number, detail: string): Response {
  const title = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed', 503: 'Service Unavailable' }[status] ?? 'Error'
  return new Response(JSON.stringify({ type: 'about:blank', title, status, detail }), { status, headers: { 'content-type': 'application/problem+json', 'cache-control': 'no-store' } })
}
