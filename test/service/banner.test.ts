import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startProvider, startService, type TestProcess } from '../helpers/processes.js'

// The service's first line names what it runs on, each part once: with a provider given by
// PROVIDER_URL (--provider-url) it read "provider at URL at URL".
let db: TestDatabase
let provider: TestProcess
let service: TestProcess

beforeAll(async () => {
  db = await createTestDatabase()
  provider = await startProvider()
  service = await startService({ databaseUrl: db.url, schema: db.schema, providerUrl: provider.url })
})

afterAll(async () => {
  await service?.stop()
  await provider?.stop()
  await db?.close()
})

describe('the startup banner', () => {
  it('names a given provider once, by its URL', () => {
    const first = service.stdout().split('\n')[0] ?? ''
    expect(first).toMatch(/^oncely reference service \([\w-]+, pid \d+\) on .+, provider at \S+$/)
    expect(first.endsWith(`, provider at ${provider.url}`)).toBe(true)
    expect(first.split(provider.url)).toHaveLength(2)
  })
})
