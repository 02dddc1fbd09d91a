import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, currentFingerprint, fingerprintRequest, fingerprintsMatch, type ClaimRequest } from '../../src/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

const base = { method: 'POST', route: '/v1/upload' }
const fp = (body: unknown, mediaType?: string) => fingerprintRequest(mediaType === undefined ? { ...base, body } : { ...base, body, mediaType })

describe('fingerprints never collide across body kinds (issue 8, path 7)', () => {
  it('raw bytes differ from the JSON object that spelled them in base64', () => {
    expect(fp(Buffer.from('hi'))).not.toBe(fp({ bytes: 'aGk=' }))
  })

  it('no body differs from a JSON null', () => {
    expect(fp(undefined)).not.toBe(fp(null))
  })

  it('a text body differs from the JSON string with the same characters', () => {
    expect(fp('hi', 'text/plain; charset=utf-8')).not.toBe(fp('hi', 'application/json'))
    expect(fp('hi', 'application/json')).toBe(fp('hi'))
  })

  it('a parsed JSON value is hashed as JSON whatever media type came with it', () => {
    expect(fp({ a: 1 }, 'text/plain')).toBe(fp({ a: 1 }))
    expect(fp([1, 2], 'text/csv')).toBe(fp([1, 2]))
  })

  it('the media type of a byte or text body matters, its parameters and case do not', () => {
    expect(fp(Buffer.from('x'), 'image/png')).not.toBe(fp(Buffer.from('x'), 'application/pdf'))
    expect(fp('x', 'text/csv')).not.toBe(fp('x', 'text/plain'))
    expect(fp('x', 'Text/Plain; charset=UTF-8')).toBe(fp('x', 'text/plain'))
  })

  it('is versioned, and compares a stored older fingerprint by the rule that made it', () => {
    const current = fp({ amount: 1 })
    expect(current).toMatch(/^v2:[0-9a-f]{64};v1:[0-9a-f]{64}$/)
    const [v2, v1] = current.split(';') as [string, string]
    expect(fingerprintsMatch(v2, current)).toBe(true)
    // What a release before the versioning stored: the bare v1 hex.
    expect(fingerprintsMatch(v1.slice(3), current)).toBe(true)
    expect(fingerprintsMatch(v1.slice(3), fp({ amount: 2 }))).toBe(false)
    expect(fingerprintsMatch(v2, fp({ amount: 2 }))).toBe(false)
    // A custom fingerprint is compared as a plain string.
    expect(fingerprintsMatch('custom', 'custom')).toBe(true)
    expect(fingerprintsMatch('custom', current)).toBe(false)
  })
})

describe('a key stored before the upgrade (issue 8, path 7)', () => {
  let db: TestDatabase
  beforeAll(async () => {
    db = await createTestDatabase()
  })
  afterAll(async () => {
    await db.close()
  })

  it('is still replayed to the same request, and still refuses another one', async () => {
    const { engine } = engineOn(db)
    const request = fp({ amount: 1 })
    const first = await engine.begin({ scope: 'u1', key: 'upgrade', fingerprint: request })
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.complete(jsonResponse(201, '{"old":true}'))
    const stored = await db.pool.query<{ fingerprint: string }>(`SELECT fingerprint FROM ${keyTable(db)} WHERE key = 'upgrade'`)
    expect(stored.rows[0]?.fingerprint).toBe(request.split(';')[0])
    // Rewrite the row as the previous release stored it: the bare v1 hash.
    await db.pool.query(`UPDATE ${keyTable(db)} SET fingerprint = $1 WHERE key = 'upgrade'`, [request.split(';')[1]?.slice(3)])
    expect((await engine.begin({ scope: 'u1', key: 'upgrade', fingerprint: request })).kind).toBe('replay')
    expect((await engine.begin({ scope: 'u1', key: 'upgrade', fingerprint: fp({ amount: 2 }) })).kind).toBe('mismatch')
  })

  it('given the current rule alone, asks for the earlier rules only for a key stored by one (issue 21)', async () => {
    const { engine } = engineOn(db)
    const input = { ...base, body: { amount: 3 } }
    let asked = 0
    const begin = (key: string, body = input.body) => {
      const request = { ...input, body }
      return engine.begin({ scope: 'u1', key, fingerprint: currentFingerprint(request), earlierFingerprint: () => (asked++, fingerprintRequest(request)) })
    }
    const first = await begin('lazy')
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.complete(jsonResponse(201, '{"lazy":true}'))
    expect([(await begin('lazy')).kind, asked]).toEqual(['replay', 0])
    await db.pool.query(`UPDATE ${keyTable(db)} SET fingerprint = $1 WHERE key = 'lazy'`, [fingerprintRequest(input).split(';')[1]?.slice(3)])
    expect([(await begin('lazy')).kind, asked]).toEqual(['replay', 1])
    expect((await begin('lazy', { amount: 4 })).kind).toBe('mismatch')
  })

  it("a store's claim is handed an earlierFingerprint only when the caller gave one, never a member set to undefined", async () => {
    const { store } = engineOn(db)
    const seen: ClaimRequest[] = []
    const engine = createEngine({ store: { ...store, claim: (request: ClaimRequest) => (seen.push(request), store.claim(request)) } })
    const request = { ...base, body: { amount: 5 } }
    const plain = await engine.begin({ scope: 'u1', key: 'no-earlier', fingerprint: fingerprintRequest(request) })
    const lazy = await engine.begin({ scope: 'u1', key: 'with-earlier', fingerprint: currentFingerprint(request), earlierFingerprint: () => fingerprintRequest(request) })
    for (const decision of [plain, lazy]) if (decision.kind === 'execute') await decision.execution.release()
    expect(seen.map((claim) => Object.hasOwn(claim, 'earlierFingerprint'))).toEqual([false, true])
  })
})
