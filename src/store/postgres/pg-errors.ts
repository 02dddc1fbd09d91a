/** PostgreSQL errors are classified by SQLSTATE, never by message text (style rule 10). */
export const SQLSTATE = {
  uniqueViolation: '23505',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
  objectInUse: '55006',
  lockNotAvailable: '55P03',
  undefinedTable: '42P01',
  undefinedColumn: '42703',
  invalidTextRepresentation: '22P02',
} as const

/** SQLSTATEs after which the same statement may simply be run again. */
const TRANSIENT: ReadonlySet<string> = new Set([
  SQLSTATE.serializationFailure,
  SQLSTATE.deadlockDetected,
  SQLSTATE.adminShutdown,
  SQLSTATE.crashShutdown,
  SQLSTATE.cannotConnectNow,
])

export function sqlState(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error) {
    const code = error.code
    if (typeof code === 'string' && code.length === 5) return code
  }
  return undefined
}

export function isTransientPgError(error: unknown): boolean {
  const code = sqlState(error)
  return code !== undefined && TRANSIENT.has(code)
}
