import type { QueryConfig, Queryable } from '../store/postgres/index.js'

/**
 * The service's own tables, apart from oncely's: the charges it made, and the naive key table the
 * two broken strategies use. A fixed schema, so it never mixes with oncely's (`doctor` checks
 * that one against the migrations).
 */
export const SERVICE_SCHEMA = 'oncely_reference'

const CREATE_TABLES = `
CREATE SCHEMA IF NOT EXISTS ${SERVICE_SCHEMA};
CREATE TABLE IF NOT EXISTS ${SERVICE_SCHEMA}.charges (
  id                 text        PRIMARY KEY,
  user_id            text        NOT NULL,
  amount             bigint      NOT NULL,
  currency           text        NOT NULL,
  customer           text        NOT NULL,
  status             text        NOT NULL,
  provider_charge_id text        NOT NULL,
  idempotency_key    text,
  created            bigint      NOT NULL,
  inserted_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS charges_user_id ON ${SERVICE_SCHEMA}.charges (user_id);
CREATE TABLE IF NOT EXISTS ${SERVICE_SCHEMA}.naive_idempotency_key (
  user_id         text        NOT NULL,
  key             text        NOT NULL,
  claim_id        uuid        NOT NULL,
  request_hash    text        NOT NULL,
  status          text        NOT NULL,
  response_status integer,
  response_body   text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, key)
);`

/** Creates the service's tables if missing; serialised by an advisory lock, so concurrent starts agree. */
export async function createServiceTables(tx: Queryable): Promise<void> {
  await tx.query({ text: `SELECT pg_advisory_xact_lock(hashtext('oncely:reference-service'))` })
  await tx.query({ text: CREATE_TABLES })
}

export interface ChargeRow {
  id: string
  user_id: string
  amount: string
  currency: string
  customer: string
  status: string
  provider_charge_id: string
  created: string
}

export const INSERT_CHARGE = `
INSERT INTO ${SERVICE_SCHEMA}.charges (id, user_id, amount, currency, customer, status, provider_charge_id, idempotency_key, created)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

export const SELECT_CHARGE = `
SELECT id, user_id, amount::text, currency, customer, status, provider_charge_id, created::text
  FROM ${SERVICE_SCHEMA}.charges WHERE id = $1 AND user_id = $2`

/** The service's view of a charge, as `POST` answers it and `GET` returns it. */
export interface ChargeView {
  id: string
  object: 'charge'
  amount: number
  currency: string
  customer: string
  status: string
  provider_charge: string
  created: number
}

export function chargeView(row: ChargeRow): ChargeView {
  return {
    id: row.id,
    object: 'charge',
    amount: Number(row.amount),
    currency: row.currency,
    customer: row.customer,
    status: row.status,
    provider_charge: row.provider_charge_id,
    created: Number(row.created),
  }
}

/**
 * The charge row's INSERT, unsent: for a completion that sends its writes as statements. Named,
 * so each connection parses and plans it once instead of at every charge (issue 21).
 */
export function insertChargeStatement(userId: string, key: string | null, charge: ChargeView): QueryConfig {
  return {
    name: 'oncely_reference_insert_charge',
    text: INSERT_CHARGE,
    values: [charge.id, userId, charge.amount, charge.currency, charge.customer, charge.status, charge.provider_charge, key, charge.created],
  }
}

export async function insertCharge(tx: Queryable, userId: string, key: string | null, charge: ChargeView): Promise<void> {
  await tx.query(insertChargeStatement(userId, key, charge))
}
