import { isIP } from 'node:net'

/** The socket a request came in on, as the server that accepted it saw it. */
export interface ConsolePeer {
  localAddress: string | undefined
  remoteAddress: string | undefined
}

// Filled only by the servers of this package, for the Request objects they build: a Request made
// anywhere else, whatever headers it carries, has no peer, so nothing a client or a proxy sends
// can make a request count as local.
const peers = new WeakMap<Request, ConsolePeer>()

/** Records the socket a request came in on (for the loopback check and the audit line). */
export function notePeer(request: Request, peer: ConsolePeer): Request {
  peers.set(request, { localAddress: peer.localAddress, remoteAddress: peer.remoteAddress })
  return request
}

export function peerOf(request: Request): ConsolePeer | undefined {
  return peers.get(request)
}

/** 127.0.0.0/8, ::1, and IPv4 loopback mapped into IPv6: addresses only, never a name. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return false
  const bare = address.replace(/^\[|\]$/g, '')
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare)?.[1]
  if (isIP(mapped ?? bare) === 4) return (mapped ?? bare).startsWith('127.')
  // The URL parser writes every spelling of an IPv6 address in its one short form.
  return isIP(bare) === 6 && new URL(`http://[${bare}]/`).hostname === '[::1]'
}

/** The host names a local browser uses for a loopback listener; other names are refused (DNS rebinding). */
export const LOOPBACK_HOST_NAMES: ReadonlySet<string> = new Set(['127.0.0.1', 'localhost', '[::1]', '::1'])

/** A host the token-less listener may bind: a loopback address, or `localhost`. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || isLoopbackAddress(host.replace(/^\[|\]$/g, ''))
}

/** Headers a reverse proxy adds: their presence (never their value) refuses a token-less request. */
export const PROXY_HEADERS = ['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'x-real-ip', 'via'] as const

/**
 * Who made a change, for the audit line: how the console authenticated them, the socket's
 * remote address, and what a proxy header claims (never trusted, shown as claimed).
 */
export function actorOf(request: Request, access: 'token' | 'loopback listener'): string {
  const remote = peerOf(request)?.remoteAddress ?? 'an address the server did not give'
  const claimed = request.headers.get('x-forwarded-for')
  return `console (${access}) from ${remote}${claimed === null ? '' : ` (X-Forwarded-For claims ${JSON.stringify(claimed.slice(0, 200))})`}`
}
