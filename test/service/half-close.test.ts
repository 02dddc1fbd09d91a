import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { providerCharges } from '../helpers/processes.js'
import { charge } from './support/api.js'
import { useService } from './support/service-fixture.js'

// A client may send its whole request and then shut its side of the socket down (a half-close:
// `curl` with some proxies, `nc -N`, scripts that write then end). The request is complete, so
// the service answers it on the half that is still open; it used to drop the request instead.
const world = useService()

/** Writes `request` whole, ends the socket's write side, and reads until the service closes it. */
function sendThenHalfClose(request: string): Promise<string> {
  const { hostname, port } = new URL(world.service.url)
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port), allowHalfOpen: true })
    let received = ''
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => (received += chunk))
    socket.once('error', reject)
    socket.once('close', () => resolve(received))
    socket.once('connect', () => socket.end(request))
  })
}

describe('a client that half-closes after its request', () => {
  it('gets its answer to a GET', async () => {
    const answer = await sendThenHalfClose('GET /healthz HTTP/1.1\r\nHost: service\r\n\r\n')
    expect(answer).toMatch(/^HTTP\/1\.1 200 /)
    expect(answer).toContain('"status":"ok"')
  })

  it('gets its charge created, once, answered on the open half', async () => {
    const body = charge('cus_half_close')
    const request = [
      'POST /v1/charges HTTP/1.1',
      'Host: service',
      'Authorization: Bearer demo_4101',
      'Idempotency-Key: half-close-1',
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      '',
      body,
    ].join('\r\n')
    const answer = await sendThenHalfClose(request)
    expect(answer).toMatch(/^HTTP\/1\.1 201 /)
    // The stored answer: the request ran to its end, and a retry replays it.
    const replay = await fetch(`${world.service.url}/v1/charges`, { method: 'POST', headers: { authorization: 'Bearer demo_4101', 'idempotency-key': 'half-close-1', 'content-type': 'application/json' }, body })
    expect(replay.status).toBe(201)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(await providerCharges(world.provider.url, '4101')).toHaveLength(1)
  })
})
