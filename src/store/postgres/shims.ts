/**
 * Shims that let users of other database libraries pass their own open transaction wherever the
 * store takes a `Queryable` (`execution.complete(response, { tx })`), so their business writes
 * and oncely's completion commit together (Invariant 8). Structural types only: oncely has no
 * runtime dependency on any of these libraries.
 */
import { randomUUID } from 'node:crypto'
import { OncelyError } from '../../errors.js'
import type { Queryable, QueryConfig, QueryResult } from './executor.js'

/** The part of a postgres.js `sql` (or `TransactionSql`) the shim calls. */
export interface PostgresJsLike {
  unsafe(query: string, parameters?: unknown[]): PromiseLike<ArrayLike<unknown> & { count?: number | null }>
}

/**
 * @example
 * ```ts
 * import postgres from 'postgres'
 * import { fromPostgresJs } from 'oncely/postgres'
 * const sql = postgres(process.env.DATABASE_URL!)
 * await sql.begin(async (trx) => {
 *   await trx`INSERT INTO orders (id) VALUES (${42})`
 *   await execution.complete(response, { tx: fromPostgresJs(trx) })
 * })
 * ```
 */
export function fromPostgresJs(sql: PostgresJsLike): Queryable {
  return {
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      const result = await sql.unsafe(config.text, config.values ?? [])
      return { rows: Array.from(result) as R[], rowCount: result.count ?? result.length }
    },
  }
}

/** The part of a Kysely `Transaction` (or `Kysely`) the shim calls. */
export interface KyselyLike {
  // `never`: Kysely's parameter is its own CompiledQuery type, which oncely does not import.
  executeQuery(query: never): Promise<{ rows: unknown[]; numAffectedRows?: bigint }>
}

/**
 * @example
 * ```ts
 * import { fromKysely } from 'oncely/postgres'
 * await kysely.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: 42 }).execute()
 *   await execution.complete(response, { tx: fromKysely(trx) })
 * })
 * ```
 */
export function fromKysely(trx: KyselyLike): Queryable {
  return {
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      // The same shape as Kysely's own CompiledQuery.raw: a raw node, run as it is.
      const compiled = {
        sql: config.text,
        parameters: config.values ?? [],
        query: { kind: 'RawNode', sqlFragments: [config.text], parameters: [] },
        queryId: { queryId: randomUUID() },
      }
      const result = await trx.executeQuery(compiled as never)
      const affected = result.numAffectedRows === undefined ? result.rows.length : Number(result.numAffectedRows)
      return { rows: result.rows as R[], rowCount: affected }
    },
  }
}

/** Drizzle's `sql` template tag, as imported from `drizzle-orm`. */
export type DrizzleSqlTag = (strings: TemplateStringsArray, ...values: unknown[]) => unknown

/** The part of a Drizzle transaction (on node-postgres or postgres.js) the shim calls. */
export interface DrizzleLike {
  execute(query: never): PromiseLike<unknown>
}

/**
 * Drizzle binds values only through its `sql` tag, so the shim takes it too: pass the `sql`
 * you import from `drizzle-orm`. Works on the node-postgres driver (`rowCount`) and the
 * postgres.js driver (`count`); on a driver that reports neither, the call throws
 * `ONCELY_STORE_UNEXPECTED` rather than mistake a completion for a lost lock.
 *
 * @example
 * ```ts
 * import { sql } from 'drizzle-orm'
 * import { fromDrizzle } from 'oncely/postgres'
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: 42 })
 *   await execution.complete(response, { tx: fromDrizzle(tx, sql) })
 * })
 * ```
 */
export function fromDrizzle(tx: DrizzleLike, sql: DrizzleSqlTag): Queryable {
  return {
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      const { strings, values } = toTemplate(config.text, config.values ?? [])
      const result = await tx.execute(sql(strings, ...values) as never)
      // node-postgres: a result object with rows and rowCount.
      if (!Array.isArray(result)) {
        const { rows, rowCount } = result as { rows?: unknown; rowCount?: number | null }
        // Statements that touch no rows (SET, BEGIN) report a null rowCount: that is fine.
        if (!Array.isArray(rows) || rowCount === undefined) throw unknownDriver()
        return { rows: rows as R[], rowCount }
      }
      // postgres.js: the rows themselves, with the affected count beside them (issue 8, path 17).
      const count = (result as unknown[] & { count?: unknown }).count
      if (typeof count !== 'number') throw unknownDriver()
      return { rows: result as R[], rowCount: count }
    },
  }
}

function unknownDriver(): OncelyError {
  return new OncelyError('ONCELY_STORE_UNEXPECTED', "fromDrizzle: this Drizzle driver's result has neither rowCount (node-postgres) nor count (postgres.js), so a completion cannot be confirmed")
}

/** The part of a TypeORM `QueryRunner` the shim calls (`manager.queryRunner` inside a transaction). */
export interface TypeOrmQueryRunnerLike {
  query(query: string, parameters: unknown[] | undefined, useStructuredResult: true): Promise<{ records: unknown[]; affected?: number | null }>
}

/**
 * @example
 * ```ts
 * import { fromTypeORM } from 'oncely/postgres'
 * await dataSource.transaction(async (manager) => {
 *   await manager.query('INSERT INTO orders (id) VALUES ($1)', [42])
 *   await execution.complete(response, { tx: fromTypeORM(manager.queryRunner!) })
 * })
 * ```
 */
export function fromTypeORM(queryRunner: TypeOrmQueryRunnerLike): Queryable {
  return {
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      const result = await queryRunner.query(config.text, config.values ?? [], true)
      return { rows: result.records as R[], rowCount: result.affected ?? result.records.length }
    },
  }
}

/**
 * Turns `$n` placeholders into template fragments and values, in order of appearance, so a
 * tagged template can bind them (a placeholder used twice binds its value twice).
 */
function toTemplate(text: string, values: unknown[]): { strings: TemplateStringsArray; values: unknown[] } {
  const fragments: string[] = []
  const ordered: unknown[] = []
  let last = 0
  for (const match of text.matchAll(/\$(\d+)/g)) {
    fragments.push(text.slice(last, match.index))
    ordered.push(values[Number(match[1]) - 1])
    last = match.index + match[0].length
  }
  fragments.push(text.slice(last))
  return { strings: Object.assign([...fragments], { raw: [...fragments] }), values: ordered }
}
