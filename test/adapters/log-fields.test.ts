import { describe, expect, it } from 'vitest'
import { requestLogFields } from '../../src/adapters/log-fields.js'
import { logKey } from '../../src/logger.js'

describe('requestLogFields', () => {
  it('holds the hashed key as a plain value, and every way of writing a line sees the hash (issue 21)', () => {
    const fields = requestLogFields({ method: 'post', route: '/v1/charges', scope: 7, key: 'order-1' })
    // A value, not a getter: a getter's closure outlived the request in V8's young collections.
    expect(Object.getOwnPropertyDescriptor(fields, 'key')).toMatchObject({ value: logKey('order-1'), enumerable: true })
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
