import { afterEach, describe, expect, it, vi } from 'vitest'
import { OncelyError } from '../../src/index.js'
import { decodeStepResult, encodeStepResult, toStoredForm } from '../../src/engine/steps.js'
import { backoffMs, retryTransient } from '../../src/engine/retry.js'

// How a step result is stored, and the backoff between retries of a transient error, no SQL
// (issue 13: the mutants these kill survived the rest of the suite).
afterEach(() => {
  vi.restoreAllMocks()
})

describe('a step result as stored', () => {
  it('undefined is stored as null; a value JSON cannot hold is refused', () => {
    expect(toStoredForm(undefined)).toEqual({ ok: true, value: null, json: 'null' })
    expect(toStoredForm(() => 1)).toEqual({ ok: false })
    expect(toStoredForm({ n: 1n })).toEqual({ ok: false })
  })

  it('is the value itself, readable by operators, unless it holds U+0000 or looks like the wrapper', () => {
    for (const value of ['text', 5, [1, 2], null, { 'oncely:json': 5 }, { 'oncely:json': 'x', other: 1 }, { other: 'x' }]) {
      expect(encodeStepResult(value, JSON.stringify(value))).toBe(value)
      expect(decodeStepResult(value)).toBe(value)
    }
    const nul = { note: 'a\u0000b' }
    expect(encodeStepResult(nul, JSON.stringify(nul))).toEqual({ 'oncely:json': JSON.stringify(nul) })
    const lookalike = { 'oncely:json': '{"x":1}' }
    expect(encodeStepResult(lookalike, JSON.stringify(lookalike))).toEqual({ 'oncely:json': JSON.stringify(lookalike) })
    expect(decodeStepResult({ 'oncely:json': JSON.stringify(lookalike) })).toEqual(lookalike)
  })
})

describe('backoff', () => {
  it('is at most 25 ms doubled per attempt, capped at a second', () => {
    vi.spyOn(Math, 'random').mockReturnValue(1)
    expect([0, 1, 2, 5, 6, 40].map(backoffMs)).toEqual([25, 50, 100, 800, 1000, 1000])
    vi.spyOn(Math, 'random').mockReturnValue(0.5)
    expect(backoffMs(2)).toBe(50)
  })

  it('retries a transient error with growing pauses until the attempt settles', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.04)
    let attempts = 0
    const pauses: number[] = []
    const realSetTimeout = globalThis.setTimeout
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, ms?: number) => {
      pauses.push(ms ?? 0)
      return realSetTimeout(fn, 0)
    }))
    const result = await retryTransient('a test', () => true, () => performance.now() + 60_000, async () => {
      if (++attempts < 4) throw new Error('transient')
      return 'settled'
    })
    expect(result).toBe('settled')
    expect(pauses).toEqual([1, 2, 4])
  })

  it('gives up when the next try would start after the deadline, with the last error as its cause', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1)
    const last = Object.assign(new Error('connection reset'), { code: 'ECONNRESET' })
    let attempts = 0
    // The deadline is 10 ms away: the first pause (25 ms) would end past it.
    const error = await retryTransient('the claim', () => true, () => performance.now() + 10, async () => {
      attempts++
      throw last
    }).catch((e: unknown) => e)
    expect(attempts).toBe(1)
    expect(error).toBeInstanceOf(OncelyError)
    expect(error).toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE', message: 'the claim: the database stayed unavailable (ECONNRESET: connection reset)', cause: last })
  })

  it('gives up too when the next try would start exactly at the deadline', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1)
    // performance.now() stands still: the first pause (25 ms) ends on the deadline to the
    // millisecond, and a second try would settle.
    vi.useFakeTimers({ toFake: ['performance'] })
    try {
      const deadline = performance.now() + 25
      let attempts = 0
      const outcome = await retryTransient('the claim', () => true, () => deadline, async () => {
        if (++attempts === 1) throw new Error('transient')
        return 'settled'
      }).catch((e: unknown) => e)
      expect(attempts).toBe(1)
      expect(outcome).toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
    } finally {
      vi.useRealTimers()
    }
  })
})
