import path from 'node:path'
import { pathToFileURL } from 'node:url'
import type { ReconcileHook } from '../ops/reconciler.js'
import { createOutbox } from '../outbox/index.js'
import { chargeReconcileHook } from '../reference-service/charge-reconcile-hook.js'
import type { PoolLike, Queryable } from '../store/postgres/index.js'
import { UsageError } from './command.js'

/** The hook of `oncely reconcile` and `oncely console`: `--hook MODULE`, else the reference service's. */
export async function reconcileHookFrom(values: { hook?: string | undefined; 'provider-url'?: string | undefined }, pool: PoolLike, schema: string): Promise<ReconcileHook<Queryable>> {
  if (values.hook !== undefined) return loadHook(values.hook, pool, schema)
  const providerUrl = values['provider-url'] ?? (process.env.PROVIDER_URL?.trim() || 'http://127.0.0.1:3001')
  return chargeReconcileHook({ pool, providerUrl, outbox: createOutbox({ schema }) })
}

async function loadHook(file: string, pool: PoolLike, schema: string): Promise<ReconcileHook<Queryable>> {
  let loaded: { default?: unknown; createReconcileHook?: unknown }
  try {
    loaded = (await import(pathToFileURL(path.resolve(file)).href)) as typeof loaded
  } catch (error) {
    throw new UsageError(`--hook ${file} could not be loaded: ${(error as Error).message}`)
  }
  if (typeof loaded.createReconcileHook === 'function') {
    const hook = (await (loaded.createReconcileHook as (context: { pool: PoolLike; schema: string }) => unknown)({ pool, schema }))
    if (typeof hook === 'function') return hook as ReconcileHook<Queryable>
  }
  if (typeof loaded.default === 'function') return loaded.default as ReconcileHook<Queryable>
  throw new UsageError(`--hook ${file} must export a default hook function, or createReconcileHook({ pool, schema })`)
}

