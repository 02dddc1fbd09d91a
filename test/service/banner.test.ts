import { describe, expect, it } from 'vitest'
import { startService } from '../helpers/processes.js'
import { useService } from './support/service-fixture.js'

// The service's first line names what it runs on, each part once: with a provider given by
// PROVIDER_URL (--provider-url) it read "provider at URL at URL".
const world = useService()

describe('the startup banner', () => {
  it('names a given provider once, by its URL', () => {
    const first = world.service.stdout().split('\n')[0] ?? ''
    expect(first).toMatch(/^oncely reference service \([\w-]+, pid \d+\) on .+, provider at \S+$/)
    expect(first.endsWith(`, provider at ${world.provider.url}`)).toBe(true)
    expect(first.split(world.provider.url)).toHaveLength(2)
  })

  it('shows a provider URL without its credentials or query values', async () => {
    const given = new URL(world.provider.url)
    given.username = 'oncely'
    given.password = 'pr0vider-secret'
    given.search = '?api_key=sk_test_banner'
    const service = await startService({ databaseUrl: world.db.url, schema: world.db.schema, providerUrl: given.toString() })
    try {
      const first = service.stdout().split('\n')[0] ?? ''
      expect(first.endsWith(`, provider at ${given.origin}/?api_key=***`)).toBe(true)
      expect(service.stdout()).not.toMatch(/pr0vider-secret|sk_test_banner/)
    } finally {
      await service.stop()
    }
  })
})
