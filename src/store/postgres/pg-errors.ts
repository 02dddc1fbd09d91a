/** PostgreSQL errors are classified by SQLSTATE, never by message text (docs/conventions.md, SQL). */
export const SQLSTATE = {
  uniqueViolation: '23505',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  queryCanceled: '57014',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
  tooManyConnections: '53300',
  objectInUse: '55006',
  lockNotAvailable: '55P03',
  undefinedTable: '42P01',
  undefinedColumn: '42703',
  invalidTextRepresentation: '22P02',
  untranslatableCharacter: '22P05',
  /** oncely's own (migration 005): a completion flight's fence was lost, so its transaction rolls back. */
  fenceLost: 'ON001',
} as const

/**
 * SQLSTATEs after which the same statement may simply be sent again: the statement did not
 * take effect (or, for a connection lost mid-statement, may have: see `isConnectionError`).
 * 57014 is a statement timeout (or a cancel); 55P03 a lock timeout.
 */
const TRANSIENT: ReadonlySet<string> = new Set([
  SQLSTATE.serializationFailure,
  SQLSTATE.deadlockDetected,
  SQLSTATE.lockNotAvailable,
  SQLSTATE.queryCanceled,
  SQLSTATE.adminShutdown,
  SQLSTATE.crashShutdown,
  SQLSTATE.cannotConnectNow,
  SQLSTATE.tooManyConnections,
])

/** Class 08: connection exceptions, whatever the subclass. */
const CONNECTION_EXCEPTION_CLASS = '08'

export function sqlState(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error) {
    const code = error.code
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code
  }
  return undefined
}

/**
 * A failure of the connection rather than of the statement: node-postgres gives these no
 * SQLSTATE. A Node system error (`ECONNRESET`, `ECONNREFUSED`, `EPIPE`, …, recognised by its
 * `syscall`) is one; the store also counts any error without a SQLSTATE that its own statement
 * raised (a connection terminated mid-statement is a plain Error), see `store.ts`.
 */
export function isConnectionError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false
  const code = 'code' in error ? error.code : undefined
  return typeof code === 'string' && code.startsWith('E') && 'syscall' in error
}

/**
 * True for a PostgreSQL error after which the same statement may be sent again: a serialization
 * failure, a deadlock, a lock or statement timeout, a server shutting down or refusing
 * connections, a connection exception (class 08), or a connection failure without a SQLSTATE.
 */
export function isTransientPgError(error: unknown): boolean {
  const code = sqlState(error)
  if (code === undefined) return isConnectionError(error)
  return TRANSIENT.has(code) || code.startsWith(CONNECTION_EXCEPTION_CLASS)
}
