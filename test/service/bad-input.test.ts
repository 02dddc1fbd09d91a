import { connect } from 'node:net'
import { describe, expect, it } from 'vitest'
import { sendOversizedBody } from '../helpers/oversized-body.js'
import { providerCharges } from '../helpers/processes.js'
import { charge, get, isProblem, newUser, post } from './support/api.js'
import { useService } from './support/service-fixture.js'

// Bad input never yields a 500 or a dead process, and /healthz stays 200 after.
const world = useService()

/**
 * Sends raw bytes on a fresh socket and resolves to the status line's code (0 if the server just
 * closed). `halfClose` ends the client's side after the request, as a refusal needs no more; a
 * request that runs (`Connection: close` on it) keeps it open until the server closes.
 */
function raw(request: Buffer, halfClose = true): Promise<number> {
  const { hostname, port } = new URL(world.api)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let received = ''
    socket.on('data', (chunk) => (received += chunk.toString('latin1')))
    socket.on('error', (error: NodeJS.ErrnoException) => (error.code === 'ECONNRESET' ? resolve(statusOf(received)) : reject(error)))
    socket.on('close', () => resolve(statusOf(received)))
    if (halfClose) socket.end(request)
    else socket.write(request)
  })
}

function statusOf(response: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0)
}

function rawCharge(headerLines: Buffer[], body = charge()): Buffer {
  const { host } = new URL(world.api)
  return Buffer.concat([
    Buffer.from(`POST /v1/charges HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer demo_7\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n`),
    ...headerLines.flatMap((line) => [line, Buffer.from('\r\n')]),
    Buffer.from('\r\n'),
    Buffer.from(body),
  ])
}

describe('bad input', () => {
  it('non-JSON and malformed bodies: 400 problems', async () => {
    const user = newUser()
    for (const body of ['', 'null', '{', '\u0000\u0001\u0002', 'amount=1000&currency=usd', '{"amount":1e400,"currency":"usd","customer":"c"}']) {
      const answer = await post(world.api, { user, key: `bad-${body.length}`, body })
      expect(isProblem(answer, 400), JSON.stringify(body)).toBe(true)
    }
  })

  it('a 2 MB body: 413 problem', async () => {
    const body = JSON.stringify({ amount: 1000, currency: 'usd', customer: 'x'.repeat(2 * 1024 * 1024) })
    const answer = await post(world.api, { user: newUser(), key: 'big-1', body })
    expect(isProblem(answer, 413)).toBe(true)
  })

  it('a 2 MB body sent without waiting: read to its end, so the 413 arrives and the connection carries the next request', async () => {
    const { host, port } = new URL(world.api)
    const head = `POST /v1/charges HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer demo_${newUser()}\r\nIdempotency-Key: big-raw\r\nContent-Type: application/json\r\n`
    const followUp = `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`
    expect(await sendOversizedBody(Number(port), head, 2 * 1024 * 1024, followUp)).toEqual({ statuses: [413, 200], writeError: undefined })
  })

  it('a chunked body (no Content-Length) is read and counted by the body limit: 201 small, 413 past the limit', async () => {
    const { host } = new URL(world.api)
    const chunked = (key: string, body: string) => {
      const chunks = [body.slice(0, 10), body.slice(10)].filter((part) => part.length > 0)
      return Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer demo_${newUser()}\r\nIdempotency-Key: ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n` +
          chunks.map((part) => `${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`).join('') +
          '0\r\n\r\n',
      )
    }
    expect(await raw(chunked('chunked-small', charge()), false)).toBe(201)
    expect(await raw(chunked('chunked-big', JSON.stringify({ amount: 1000, currency: 'usd', customer: 'x'.repeat(200 * 1024) })), false)).toBe(413)
  })

  it('huge and binary headers: refused with a 4xx, never a 500', async () => {
    const huge = await raw(rawCharge([Buffer.from(`X-Filler: ${'a'.repeat(64 * 1024)}`)]))
    expect(huge === 0 || (huge >= 400 && huge < 500), `status ${huge}`).toBe(true)
    const hugeKey = await raw(rawCharge([Buffer.from(`Idempotency-Key: ${'k'.repeat(8000)}`)]))
    expect(hugeKey >= 400 && hugeKey < 500, `status ${hugeKey}`).toBe(true)
    const binary = await raw(rawCharge([Buffer.concat([Buffer.from('Idempotency-Key: '), Buffer.from([0x00, 0x01, 0xff, 0xfe, 0x7f])])]))
    expect(binary === 0 || (binary >= 400 && binary < 500), `status ${binary}`).toBe(true)
    const binaryName = await raw(rawCharge([Buffer.from([0xc3, 0xa9, 0x3a, 0x20, 0x31])]))
    expect(binaryName === 0 || (binaryName >= 400 && binaryName < 500), `status ${binaryName}`).toBe(true)
  })

  it('unicode keys: 400', async () => {
    for (const key of ['clé-1', '键', '🔑-emoji', 'ключ']) {
      const status = await raw(rawCharge([Buffer.concat([Buffer.from('Idempotency-Key: '), Buffer.from(key, 'utf8')])]))
      expect(status, key).toBe(400)
    }
    const latin1 = await raw(rawCharge([Buffer.concat([Buffer.from('Idempotency-Key: '), Buffer.from('cl\xe9', 'latin1')])]))
    expect(latin1).toBe(400)
  })

  it('1,000 distinct keys at once: no 500, each key charged once', async () => {
    const user = newUser()
    const burst = (i: number) => post(world.api, { user, key: `burst-${i}` })
    let answers = await Promise.all(Array.from({ length: 1000 }, (_, i) => burst(i)))
    // One customer's completions take turns (its events keep their order, docs/outbox.md), so an
    // overloaded pool may answer a few with a retryable 503: a client retries those with the same
    // key, and each key still charges once.
    for (let round = 0; round < 5; round++) {
      const busy = answers.map((answer, i) => [answer, i] as const).filter(([answer]) => answer.status === 503)
      if (busy.length === 0) break
      for (const [answer] of busy) expect(answer.headers.get('retry-after')).not.toBeNull()
      const retried = await Promise.all(busy.map(([, i]) => burst(i)))
      answers = answers.map((answer, i) => retried[busy.findIndex(([, j]) => j === i)] ?? answer)
    }
    const statuses = new Map<number, number>()
    for (const answer of answers) statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1)
    expect(Object.fromEntries(statuses)).toEqual({ 201: 1000 })
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1000)
  })

  it('afterwards the process is alive and /healthz is 200', async () => {
    expect(world.service.child.exitCode).toBeNull()
    expect(world.service.child.signalCode).toBeNull()
    expect((await get(world.api, '/healthz')).status).toBe(200)
    expect(world.service.stderr()).not.toMatch(/internal error/)
  })
})
