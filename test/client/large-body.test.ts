import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startServer, type TestServer } from './support/http-server.js'
import { startNode } from './support/node-process.js'

// Issue 14 point 8: a 128 MiB body cost about five times its size (a base64 copy, a canonical
// JSON of it, fetch's own copy per attempt). Peak memory is measured in a child of its own, so
// that it is the client's alone; a child sending nothing gives the baseline.
let server: TestServer
beforeAll(async () => {
  server = await startServer((request, res) => {
    res.writeHead(201, { 'content-type': 'text/plain' })
    res.end(String(Buffer.byteLength(request.body)))
  })
})
afterAll(async () => {
  await server.close()
})

async function peakRssMiB(mib: number): Promise<number> {
  const child = startNode('test/client/fixtures/large-body.ts', [server.url, String(mib)])
  child.child.stdin?.end()
  const finished = await child.finished
  expect(finished.code, finished.stderr).toBe(0)
  const report = JSON.parse(finished.stdout) as { status: number; peakRssMiB: number }
  expect(report.status).toBe(201)
  return report.peakRssMiB
}

describe('a large body', () => {
  it('costs the caller’s bytes and one copy, not several', { timeout: 120_000 }, async () => {
    const baseline = await peakRssMiB(0)
    const peak = await peakRssMiB(128)
    expect(server.requests.at(-1)?.body.length).toBe(128 * 1024 * 1024)
    // The caller's 128 MiB and the client's one copy, with room for fetch's buffers.
    expect(peak - baseline).toBeLessThan(128 * 3)
  })
})
