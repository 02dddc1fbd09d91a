import { describe, expect, it } from 'vitest'
import { requestLogFields } from '../../src/adapters/log-fields.js'
import { logKey } from '../../src/logger.js'

describe('requestLogFields', () => {
  it('hashes the key only when a line is written, and every way of writing one sees the hash (issue 21)', () => {
    const fields = requestLogFields({ method: 'post', route: '/v1/charges', scope: 7, key: 'order-1' })
    // Not hashed yet: the key is a getter until a line reads it.
    expect(typeof Object.getOwnPropertyDescriptor(fields, 'key')?.get).toBe('function')
    const expected = { route: 'POST /v1/charges', scope: '7', key: logKey('order-1') }
    expect({ ...fields }).toEqual(expected)
    expect(JSON.parse(JSON.stringify(fields))).toEqual(expected)
    expect(Object.keys(fields)).toEqual(['route', 'scope', 'key'])
    expect(JSON.stringify(fields)).not.toContain('order-1')
  })

  it('has no key field without a key', () => {
    expect(requestLogFields({ method: 'GET', route: '/x' })).toEqual({ route: 'GET /x' })
  })
})
