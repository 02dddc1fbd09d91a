import { describe, expect, it } from 'vitest'
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
})
