import { describe, expect, it } from 'vitest'
import { isConnectionError, isTransientPgError } from '../../src/store/postgres/index.js'

const withCode = (code: string, extra: Record<string, unknown> = {}) => Object.assign(new Error('any text'), { code, ...extra })

describe('SQLSTATE classification (issue 8, paths 15 and 16)', () => {
  it.each(['40001', '40P01', '55P03', '57014', '57P01', '57P02', '57P03', '53300', '08006', '08003', '08000'])('%s is transient', (code) => {
    expect(isTransientPgError(withCode(code))).toBe(true)
  })

  it.each(['23505', '23503', '23514', '22P02', '22P05', '42P01', '42703', '25P02'])('%s is deterministic', (code) => {
    expect(isTransientPgError(withCode(code))).toBe(false)
  })

  it('a Node system error on the socket is a connection error, hence transient', () => {
    const reset = withCode('ECONNRESET', { syscall: 'read', errno: -104 })
    expect(isConnectionError(reset)).toBe(true)
    expect(isTransientPgError(reset)).toBe(true)
  })

  it('a plain error is neither: the message is never read', () => {
    expect(isTransientPgError(new Error('Connection terminated unexpectedly'))).toBe(false)
    expect(isConnectionError(new Error('read ECONNRESET'))).toBe(false)
  })
})
