import { describe, expect, it } from 'vitest'
import { ConfigError, resolveServiceConfig } from '../../src/reference-service/config.js'

// The reference service's console listener (issue 22): on 127.0.0.1, CONSOLE_PORT, off on demand.
describe('CONSOLE_PORT', () => {
  it.each<[Record<string, string>, number | undefined]>([
    [{}, 3002],
    [{ PORT: '0' }, 0],
    [{ PORT: '3000' }, 3002],
    [{ PORT: '8080' }, 0],
    [{ CONSOLE_PORT: '4100' }, 4100],
    [{ PORT: '0', CONSOLE_PORT: '4100' }, 4100],
    [{ CONSOLE_PORT: '0' }, 0],
    [{ CONSOLE_PORT: 'off' }, undefined],
    [{ CONSOLE_PORT: 'OFF', CONSOLE_TOKEN: 'a-token-of-sixteen-or-more' }, undefined],
  ])('%j: %s', (env, expected) => {
    expect(resolveServiceConfig(env).consolePort).toBe(expected)
  })

  it.each(['none', '-1', '65536', '3002x'])('refuses %j, naming the variable', (value) => {
    expect(() => resolveServiceConfig({ CONSOLE_PORT: value })).toThrow(ConfigError)
    expect(() => resolveServiceConfig({ CONSOLE_PORT: value })).toThrow(/^CONSOLE_PORT must be (a port from 0 to 65535, or off|an integer from 0 to 65535); got /)
  })
})
