import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Issue 21: Express swaps the prototype of every request and response, after which V8 gives each
// property added to them a hidden class of its own. The guard switches them to dictionary
// properties before it adds its own (src/adapters/dictionary-properties.ts). What that costs or
// saves is measured by bench/instructions.ts; here, that it happens, only where it should, and
// that the objects behave as before.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fixture = fileURLToPath(new URL('./fixtures/hidden-classes.ts', import.meta.url))

describe('the request and response objects the guard adds to', () => {
  it("Express's (and Nest's on Express) have dictionary properties, also when the guard answers, and keep their values; node:http's keep their shared hidden class", { timeout: 30_000 }, async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--allow-natives-syntax', '--import', 'tsx', fixture, db.url, db.schema])
    const result = JSON.parse(stdout) as Record<string, Record<string, unknown>>
    // The first answer and the retry's replay both ended on a response with dictionary properties.
    expect(result.finished).toEqual([false, false])
    expect(result.seen).toEqual({
      express: { reqFast: false, resFast: false, sendDate: false, complete: true, guarded: true },
      nest: { reqFast: false, resFast: false },
      node: { resFast: true },
    })
    // Nest on Express: the same, when the handler answered and when the interceptor replayed.
    expect(result.nestFinished).toEqual([false, false])
    expect(result.nestFirst).toMatchObject({ status: 201, body: '{"ok":true}' })
    expect(result.nestRetry).toMatchObject({ status: 201, body: '{"ok":true}' })
    // The Date header the app turned off before the guard stays off, on the answer and its replay.
    expect(result.first).toEqual({ status: 201, date: null, body: '{"ok":true}' })
    expect(result.retry).toEqual({ status: 201, date: null, body: '{"ok":true}' })
    expect(result.node).toMatchObject({ status: 201, body: '{"ok":true}' })
  })
})
