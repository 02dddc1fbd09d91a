import { spawn } from 'node:child_process'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { REPO_ROOT } from '../helpers/processes.js'
import { versionIndependentPass } from '../helpers/test-passes.js'

// Found by the database-fault tests: the completion transaction runs on a client checked out of
// the pool, and pg emits a socket error on that client as an 'error' event. With no listener,
// the process dies (every request in flight with it). A connection cut between two statements of
// the transaction must end in a completion that lands on a retry, or one refused with the
// engine's error, never in a dead process. The cut is on the
// client's side of the socket, the same on every PostgreSQL, so this runs in one pass.
let db: TestDatabase
let proxy: TcpProxy

beforeAll(async () => {
  if (!versionIndependentPass) return
  db = await createTestDatabase()
  proxy = await startTcpProxy(db.url)
})

afterAll(async () => {
  await proxy?.close()
  await db?.close()
})

describe.skipIf(!versionIndependentPass)('the database connection lost inside the completion transaction', () => {
  it('the process lives on, and the completion lands on a retry or is refused', { timeout: 30_000 }, async () => {
    const fixture = path.join(REPO_ROOT, 'test/faults/fixtures/connection-lost-in-transaction.ts')
    const child = spawn(process.execPath, ['--import', 'tsx', fixture, proxy.url, db.schema, '7'], { cwd: REPO_ROOT, stdio: ['pipe', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8')
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })))
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: string) => {
        stdout += chunk
        if (stdout.includes('in transaction')) resolve()
      })
      void exited.then(() => reject(new Error(`the worker exited early:\n${stdout}\n${stderr}`)))
    })
    proxy.cut()
    // Lets the worker's transaction go on to its COMMIT on the dead connection; the database
    // comes back half a second later, while the engine may still be retrying the completion.
    child.stdin.end('go\n')
    await new Promise((resolve) => setTimeout(resolve, 500))
    proxy.restore()
    const { code } = await exited
    // Alive, and the completion either landed on a retry or was refused with the engine's error.
    expect({ code, said: stdout.trim().split('\n').at(-1) }, stderr).toEqual({ code: 0, said: expect.stringMatching(/^(completed|rejected: ONCELY_)/) as unknown })
  })
})
