import { timingSafeEqual } from 'node:crypto'

/** The console's responses and the small readers of its requests. */

const SECURITY_HEADERS = {
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
  // same-origin, not no-referrer: with no-referrer a browser sends `Origin: null` on the login form's POST, which the Origin check refuses.
  'referrer-policy': 'same-origin',
}

export function html(body: string, status = 200): Response {
  return new Response(body, { status, headers: { 'content-type': 'text/html; charset=utf-8', ...SECURITY_HEADERS } })
}

export function json(value: unknown, status = 200): Response {
  return new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store' } })
}

export function problem(status: number, detail: string): Response {
  const title = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed', 503: 'Service Unavailable' }[status] ?? 'Error'
  return new Response(JSON.stringify({ type: 'about:blank', title, status, detail }), { status, headers: { 'content-type': 'application/problem+json', 'cache-control': 'no-store' } })
}

/** The host name of the request's `Host` header, without its port: for refusals only, never to let anyone in. */
export function hostName(request: Request): string {
  const host = request.headers.get('host') ?? new URL(request.url).host
  return host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : (host.split(':')[0] ?? '')
}

export function same(a: string, b: string): boolean {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && timingSafeEqual(left, right)
}

export function readCookie(header: string | null, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=')
    if (key === name) return value.join('=')
  }
  return undefined
}

/**
 * A change must come from the page itself: its Origin (when the browser sends one, and every
 * current browser does on POST) is the console's own, and, for API calls, it carries the CSRF
 * token only the page can read. Returns why a request is refused, or undefined.
 */
export function crossSiteRefusal(request: Request, csrf: string | undefined): string | undefined {
  const origin = request.headers.get('origin')
  const own = new URL(request.url).origin
  if (origin !== null && origin !== own && origin !== `${new URL(request.url).protocol}//${request.headers.get('host') ?? ''}`) return `a change from another origin (${origin}) is refused`
  const site = request.headers.get('sec-fetch-site')
  if (site !== null && site !== 'same-origin' && site !== 'none') return 'a cross-site change is refused'
  if (csrf !== undefined && !same(request.headers.get('x-csrf-token') ?? '', csrf)) return 'the CSRF token is missing or wrong: reload the console'
  return undefined
}
