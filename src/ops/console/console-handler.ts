import { createHmac, randomBytes } from 'node:crypto'
import { DEFAULT_STALE_AFTER_MS } from '../../engine/options.js'
import { invalid, invalidHidden, positiveInteger } from '../../option-validation.js'
import type { AdminDatabase } from '../admin-database.js'
import { keyStats } from '../key-stats.js'
import { inspectKey, listKeys, type KeyDetails } from '../keys.js'
import { resolveLogger, type LogOption } from '../../logger.js'
import type { ReconcileReport } from '../reconciler.js'
import { releaseKey, type EvictableCache } from '../release-key.js'
import { actorOf, isLoopbackAddress, LOOPBACK_HOST_NAMES, notePeer, peerOf, PROXY_HEADERS, type ConsolePeer } from './console-access.js'
import { crossSiteRefusal, hostName, html, json, problem, readCookie, same } from './console-http.js'
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
   * Required from every visitor: `Authorization: Bearer <token>`, or the login form, which sets
   * an HttpOnly, SameSite=Strict cookie. At least 16 characters. A console without a token is
   * served only by `serveConsole`, on its own loopback listener. (Default: none, required)
   */
  token: string
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
  /**
   * Answers a request whose path is under `basePath`; a fetch-style handler. `peer`, the socket
   * the request came in on as your server saw it, names the actor in the audit line of a release
   * or a reconcile; it lets no one in (the token does). (Default: none, the actor's address unknown)
   */
  fetch(request: Request, peer?: ConsolePeer): Promise<Response>
  readonly basePath: string
}

/** How the console lets a visitor in: its token, or (only on `serveConsole`'s own listener) a loopback socket. */
export type ConsoleAccess = 'token' | 'loopback listener'

const COOKIE = 'oncely_console'

/**
 * The operators' page: live rates by outcome, running and stuck claims with their ages, search
 * by user and key, a key's details, release and reconcile buttons. It shows every user's stored
 * responses, so it needs `token` from every visitor, whatever host or proxy headers a request
 * carries, and every change is a POST carrying the page's CSRF token from the page's own origin.
 * For a console without a token, use `serveConsole`, which binds loopback itself.
 *
 * @example
 * ```ts
 * import { createConsole } from 'oncely/ops'
 * const operatorConsole = createConsole({ database: { pool }, token: process.env.CONSOLE_TOKEN! })
 * app.all('/console/*', (c) => operatorConsole.fetch(c.req.raw))
 * ```
 */
export function createConsole(options: ConsoleOptions): OperatorConsole {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  if (typeof options.token !== 'string' || options.token === '') {
    throw invalid('token', 'is required: a console without one is served only by serveConsole, on its own loopback listener', options.token)
  }
  const operatorConsole = buildConsole(options, 'token')
  return Object.freeze({
    basePath: operatorConsole.basePath,
    // Only here, behind the token: a loopback listener's console never takes a peer from its caller.
    fetch: (request: Request, peer?: ConsolePeer) => operatorConsole.fetch(peer === undefined ? request : notePeer(request, peer)),
  })
}

/**
 * The console behind `createConsole` and `serveConsole`. With `'loopback listener'` it lets in
 * only requests `serveConsole` built from a socket whose both ends are loopback addresses (never
 * a header), and not one that a proxy's headers say was forwarded.
 */
export function buildConsole(options: Omit<ConsoleOptions, 'token'> & { token?: string | undefined }, access: ConsoleAccess): OperatorConsole {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const basePath = (options.basePath ?? '/console').replace(/\/+$/, '')
  if (!basePath.startsWith('/')) throw invalid('basePath', 'must start with /', options.basePath)
  const token = options.token === undefined || options.token === '' ? undefined : options.token
  if (token !== undefined && token.length < 16) throw invalidHidden('token', 'must be at least 16 characters', `${token.length} characters (not shown)`)
  if ((access === 'token') !== (token !== undefined)) throw invalid('token', access === 'token' ? 'is required' : 'must be unset on a loopback listener', '(not shown)')
  const log = resolveLogger(options.log)
  const database = options.database
  const csrf = randomBytes(24).toString('base64url')
  const cookieValue = token === undefined ? undefined : createHmac('sha256', token).update('oncely console session').digest('base64url')

  /** Why a request may not see the console at all, before any authentication. */
  const refusal = (request: Request): Response | undefined => {
    if (access === 'token') return undefined
    const peer = peerOf(request)
    // The socket, never a header: a proxy on this host sends every client's request from loopback.
    if (peer === undefined || !isLoopbackAddress(peer.localAddress) || !isLoopbackAddress(peer.remoteAddress)) {
      return problem(404, 'this console has no token: it is served only on its own loopback listener')
    }
    if (PROXY_HEADERS.some((name) => request.headers.has(name))) return problem(404, 'this console has no token: it does not answer a request a proxy forwarded; set CONSOLE_TOKEN')
    // A DNS-rebound name reaches a loopback socket from a page of another site.
    if (!LOOPBACK_HOST_NAMES.has(hostName(request))) return problem(403, 'the console answers only a loopback host name unless a token is set')
    return undefined
  }

  const authorized = (request: Request): boolean => {
    if (token === undefined) return access === 'loopback listener'
    const bearer = /^Bearer (.+)$/.exec(request.headers.get('authorization') ?? '')?.[1]
    if (bearer !== undefined && same(bearer, token)) return true
    const cookie = readCookie(request.headers.get('cookie'), COOKIE)
    return cookie !== undefined && cookieValue !== undefined && same(cookie, cookieValue)
  }

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url)
    const path = url.pathname.slice(basePath.length) || '/'
    const refused = refusal(request)
    if (refused !== undefined) return refused
    if (request.method === 'POST' && path === '/login' && token !== undefined) return login(request)
    if (!authorized(request)) {
      return request.method === 'GET' && path === '/' ? html(loginPage(basePath), 401) : problem(401, 'send Authorization: Bearer <CONSOLE_TOKEN>, or log in')
    }
    if (request.method === 'GET') {
      if (path === '/') return html(consolePage({ basePath, csrf, canReconcile: options.reconcile !== undefined, canForceOutcome: access === 'token' }))
      if (path === '/console.js') return new Response(CONSOLE_SCRIPT, { headers: { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-store' } })
      if (path === '/api/overview') return json(await overview())
      if (path === '/api/keys') return json(await search(url.searchParams))
      return problem(404, `no console page ${path}`)
    }
    if (request.method !== 'POST') return problem(405, `${request.method} is not allowed here`)
    const crossSite = crossSiteRefusal(request, csrf)
    if (crossSite !== undefined) return problem(403, crossSite)
    const body = (await request.json().catch(() => ({}))) as { user?: unknown; key?: unknown; force?: unknown; confirm?: unknown }
    const actor = actorOf(request, access)
    if (path === '/api/release') {
      if (typeof body.user !== 'string' || typeof body.key !== 'string') return problem(400, 'send JSON { "user": "…", "key": "…" }')
      const key = body.key
      const checkForce = (details: KeyDetails) => storedOutcomeRefusal(details, access, body.confirm === key)
      const result = await releaseKey(database, { scope: body.user, key, force: body.force === true, staleAfterMs, actor, log, checkForce, ...(options.cache === undefined ? {} : { cache: options.cache }) })
      return json(result, result.released ? 200 : result.reason === 'refused' ? 403 : 409)
    }
    if (path === '/api/reconcile') {
      if (!options.reconcile) return problem(404, 'no reconciler is configured for this console')
      log.warn({ audit: 'reconcile', actor }, 'reconcile run requested from the console')
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
    const crossSite = crossSiteRefusal(request, undefined)
    if (crossSite !== undefined) return problem(403, crossSite)
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
 * A forced release of a key with a stored outcome throws that outcome away: the client's next
 * retry runs as a new operation and acts again (a second charge). It needs a console with a
 * token, and the key typed again as `confirm`.
 */
function storedOutcomeRefusal(details: KeyDetails, access: ConsoleAccess, confirmed: boolean): string | undefined {
  if (details.status === 'in_progress') return undefined
  if (access !== 'token') return `it holds a stored ${details.status} outcome: forcing its release needs a console started with CONSOLE_TOKEN`
  if (!confirmed) return `it holds a stored ${details.status} outcome, and the next retry would run as a new operation: send the key again as "confirm" to force its release`
  return undefined
}
