import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { deriveStepKey } from '../../src/index.js'

// Invariant 2: a resumed claim must hand the provider the key its first attempt used, across
// releases too. The key is the sha256 of the length-prefixed fields, as first written: a Hash
// updated field by field. Any rewrite of deriveStepKey must give the same bytes.
describe('deriveStepKey', () => {
  it('is the sha256 of the length-prefixed scope, key, claim id and step, as first released', () => {
    const cases = [
      { scope: '42', key: 'order-42', claimId: '0b6c5f7e-1d2a-4c3b-9e8f-7a6b5c4d3e2f', step: 'charge' },
      { scope: 'é', key: 'ключ;1:', claimId: '', step: 'a:b;c' },
    ]
    for (const parts of cases) {
      const first = createHash('sha256')
      for (const field of [parts.scope, parts.key, parts.claimId, parts.step]) first.update(`${Buffer.byteLength(field)}:${field};`)
      expect(deriveStepKey(parts)).toBe(first.digest('hex'))
    }
    expect(deriveStepKey(cases[0]!)).toBe(createHash('sha256').update('2:42;8:order-42;36:0b6c5f7e-1d2a-4c3b-9e8f-7a6b5c4d3e2f;6:charge;').digest('hex'))
  })
})
