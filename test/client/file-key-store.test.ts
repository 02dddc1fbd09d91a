import { createHash } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { fileKeyStore } from '../../src/client/index.js'
import { candidate, keyStoreContract } from './key-store-contract.js'
import { deferred } from '../helpers/deferred.js'
import { startNode } from './support/node-process.js'

const directories: string[] = []
afterAll(async () => {
  await Promise.all(directories.map((directory) => rm(directory, { recursive: true, force: true })))
})

async function freshDirectory(): Promise<string> {
  const directory = await mkdtemp(path.join(tmpdir(), 'oncely-file-keys-'))
  directories.push(directory)
  return path.join(directory, 'nested', 'keys')
}

keyStoreContract('fileKeyStore', async () => {
  const directory = await freshDirectory()
  return { store: fileKeyStore(directory), sameStore: () => fileKeyStore(directory) }
})

describe('fileKeyStore on disk', () => {
  it('writes one complete JSON file per operation and leaves no temp files', async () => {
    const directory = await freshDirectory()
    const store = fileKeyStore(directory)
    await Promise.all(Array.from({ length: 20 }, (_, i) => fileKeyStore(directory).claim(candidate('op', `k${i}`))))
    await store.finish('op', { finishedAt: new Date(), finalStatus: 201, expiresAt: new Date() })
    const names = await readdir(directory)
    expect(names).toHaveLength(1)
    expect(names[0]).toMatch(/^[0-9a-f]{64}\.json$/)
    const stored = JSON.parse(await readFile(path.join(directory, names[0] ?? ''), 'utf8')) as Record<string, unknown>
    expect(stored).toMatchObject({ operationId: 'op', finalStatus: 201 })
  })

  it('reports a corrupt record instead of minting over it', async () => {
    const directory = await freshDirectory()
    const store = fileKeyStore(directory)
    await store.claim(candidate('op', 'k'))
    const [name] = await readdir(directory)
    const { writeFile } = await import('node:fs/promises')
    await writeFile(path.join(directory, name ?? ''), '{"operationId":')
    await expect(store.claim(candidate('op', 'k2'))).rejects.toThrow(/not valid JSON/)
  })

  it('prune skips a record it cannot read and prunes the others', async () => {
    const directory = await freshDirectory()
    const store = fileKeyStore(directory)
    const finished = { finishedAt: new Date('2025-01-02T00:00:00.000Z'), finalStatus: 201, expiresAt: new Date('2025-01-03T00:00:00.000Z') }
    for (const operationId of ['a', 'b', 'corrupt']) {
      await store.claim(candidate(operationId, `k-${operationId}`))
      await store.finish(operationId, finished)
    }
    const { writeFile, mkdir } = await import('node:fs/promises')
    const names = await readdir(directory)
    const corrupt = names.find((name) => name.startsWith(createHash('sha256').update('corrupt').digest('hex')))
    await writeFile(path.join(directory, corrupt ?? ''), '{"operationId":')
    // A directory named like a record cannot be read either.
    await mkdir(path.join(directory, `${'0'.repeat(64)}.json`))
    expect(await store.prune(new Date('2025-01-04T00:00:00.000Z'))).toBe(2)
    expect((await readdir(directory)).sort()).toEqual([`${'0'.repeat(64)}.json`, corrupt].sort())
  })

  // Twenty tsx processes start slowly on a loaded machine (the CI has two cores).
  it('real processes minting for one operation at once all get the same key', { timeout: 120_000 }, async () => {
    const directory = await freshDirectory()
    const processes = 20
    const claimsEach = 2
    const children = Array.from({ length: processes }, () => startNode('test/client/fixtures/claim-key.ts', [directory, 'order-42:charge', String(claimsEach)]))
    // Every child is started and waiting before the gun: they race on the claim, not on start-up.
    await Promise.all(
      children.map((child) => {
        const ready = deferred()
        const check = (): void => {
          if (child.stdout().includes('ready')) ready.resolve()
        }
        child.child.stdout?.on('data', check)
        check()
        void child.finished.then(() => ready.reject(new Error(`child exited early: ${child.stderr()}`)))
        return ready.promise
      }),
    )
    for (const child of children) child.child.stdin?.end('go\n')
    const results = await Promise.all(children.map((child) => child.finished))
    const keys = results.flatMap((result) => {
      expect(result.code, result.stderr).toBe(0)
      return JSON.parse(result.stdout.split('\n')[1] ?? '[]') as string[]
    })
    expect(keys).toHaveLength(processes * claimsEach)
    expect(new Set(keys).size).toBe(1)
    expect(await readdir(directory)).toHaveLength(1)
  })
})
