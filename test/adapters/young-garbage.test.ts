import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Issue 21: a guarded request's objects must die young. A closure made per request and stored on
// an object (`res.end = function …`, `c.json = …`), a getter of an object literal, or a value in a
// module-wide WeakMap kept everything it reached through V8's young collections until the next
// full one: every guarded request was promoted to the old generation whole, and the service paid
// for it in collector time on its helper threads and in longer pauses. The fixture (run with
// --expose-gc) sends requests one at a time, runs the young collector after each, and reports how
// much the old generation grew; each request carries a ballast of about half a megabyte.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fixture = fileURLToPath(new URL('./fixtures/young-garbage.ts', import.meta.url))

interface Report {
  requests: number
  ballastMegabytes: number
  grownMegabytes: Record<string, number>
  statuses: Record<string, number[]>
}

describe("a guarded request's objects", () => {
  it('are not promoted to the old generation once it is answered, behind every adapter', { timeout: 60_000 }, async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '--no-allocation-site-pretenuring', '--import', 'tsx', fixture, db.url, db.schema])
    const report = JSON.parse(stdout) as Report
    const { requests, ballastMegabytes, grownMegabytes: grown } = report
    for (const [route, statuses] of Object.entries(report.statuses)) expect(statuses, route).toEqual(Array.from({ length: requests }, () => 201))
    // The unit the growth is read in: one ballast, promoted on purpose.
    expect(ballastMegabytes).toBeGreaterThan(0.3)
    const all = requests * ballastMegabytes
    // The check sees a promoted request: a route that keeps its Context through a getter grows by
    // (nearly) every request's ballast.
    expect((grown.honoGetter ?? 0) - (grown.honoPlain ?? 0)).toBeGreaterThan(0.8 * all)
    // Each guard adds less than half of that to the same framework without it (node:http has
    // no unguarded route here: its own growth is counted whole). Before the fix every one of
    // them but Fastify grew by all of it.
    expect((grown.honoGuarded ?? Infinity) - (grown.honoPlain ?? 0), JSON.stringify(grown)).toBeLessThan(0.5 * all)
    expect((grown.expressGuarded ?? Infinity) - (grown.expressPlain ?? 0), JSON.stringify(grown)).toBeLessThan(0.5 * all)
    expect((grown.fastifyGuarded ?? Infinity) - (grown.fastifyPlain ?? 0), JSON.stringify(grown)).toBeLessThan(0.5 * all)
    expect(grown.nodeGuarded ?? Infinity, JSON.stringify(grown)).toBeLessThan(0.5 * all)
  })
})
