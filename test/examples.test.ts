import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from './helpers/db.js'

const run = promisify(execFile)
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('README examples', () => {
  it('the engine example runs and prints what its comments say', async () => {
    const file = fileURLToPath(new URL('../examples/charge-once.ts', import.meta.url))
    const { stdout } = await run(process.execPath, ['--import', 'tsx', file], { env: { ...process.env, DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema } })
    expect(stdout.trim().split('\n')).toEqual([
      'executed 201 {"id":"ch_1","amount":1000}',
      'replay 201 {"id":"ch_1","amount":1000}',
      'mismatch',
      'provider charges: 1',
    ])
  })

  it('the README shows the example exactly as it is tested', async () => {
    const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8')
    const example = await readFile(new URL('../examples/charge-once.ts', import.meta.url), 'utf8')
    expect(readme).toContain('```ts\n' + example + '```')
  })
})

describe('framework examples', () => {
  // Each prints what its closing comments say: a charge, its replay, a 422, one provider call and one row.
  for (const framework of ['express', 'fastify', 'hono', 'node', 'nestjs']) {
    it(`examples/${framework}.ts runs and prints what its comments say`, { timeout: 60_000 }, async () => {
      const file = fileURLToPath(new URL(`../examples/${framework}.ts`, import.meta.url))
      const own = await createTestDatabase()
      try {
        const { stdout } = await run(process.execPath, ['--import', 'tsx', file], { env: { ...process.env, DATABASE_URL: own.url, ONCELY_SCHEMA: own.schema } })
        const source = await readFile(file, 'utf8')
        const promised = [...source.matchAll(/^\/\/ (\d{3} .*)$|\/\/ (provider charges: .*)$/gm)].map((match) => match[1] ?? match[2])
        expect(promised).toHaveLength(4)
        expect(stdout.trim().split('\n')).toEqual(promised)
      } finally {
        await own.close()
      }
    })
  }
})
