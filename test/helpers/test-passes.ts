/**
 * CI runs the suite twice: on the embedded PostgreSQL 18 (`DATABASE_URL` empty) and on
 * PostgreSQL 15 (`DATABASE_URL` set). A test whose outcome cannot depend on the server's version
 * (what it exercises is on the client side: sockets, pools, the process) runs in the second pass
 * only, where `DATABASE_URL` is set. Outside CI it always runs.
 */
export const versionIndependentPass = process.env.CI !== 'true' || Boolean(process.env.DATABASE_URL)
