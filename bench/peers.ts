import { fileURLToPath } from 'node:url'
import { interleaved } from './closed-loop.js'
import { backendsCpu, BODY, createHolds, deleteRedisEntries, expectStatus, HOLD_MS, loadRun, OTHER_BODY, spreadBodies, type LoadRun } from './http-load.js'
import { startCli, startProgram, type BenchProcess } from './processes.js'
import { AGAINST, AGAINST_REDIS, peerFigures, type PeerCell } from './peers-report.js'
import type { Figure } from './report.js'

const EXPRESS_APP = fileURLToPath(new URL('./baselines/express-app.ts', import.meta.url))
const LEAN_APP = fileURLToPath(new URL('./baselines/lean-durable.ts', import.meta.url))
// Schemas of the run's own (in a database of its own): its Redis entries are deleted by namespace.
const SERVICE_SCHEMA = `bench_peers_${process.pid}`
const EXPRESS_SCHEMA = `bench_peers_express_${process.pid}`
const LEAN_SCHEMA = `bench_peers_lean_${process.pid}`
const NONE_SCHEMA = `bench_peers_none_${process.pid}`
const AGAINST_SCHEMA = `bench_peers_against_${process.pid}`
const PEER_PREFIX = `bench-peer-${process.pid}`

/**
 * `fresh-spread`: fresh charges spread over `SPREAD_CUSTOMERS` customers. Every other cell's
 * charges are for one customer, whose `charge.succeeded` events take turns on one ordering lock
 * from enqueue to commit (docs/outbox.md, Order); this one shows the service without that queue.
 */
export type Cell = 'fresh' | 'fresh-spread' | 'replay' | 'conflict' | 'mismatch'
const EXPECTED: Record<Cell, number> = { fresh: 201, 'fresh-spread': 201, replay: 201, conflict: 409, mismatch: 422 }
const SPREAD_CUSTOMERS = 64

/** One process measured, on one route, in the cells it answers. */
interface Target {
  name: string
  process: BenchProcess
  path: string
  cells: readonly Cell[]
  /** Where a held request keeps a key in flight for this target's 409s, and the schema it claims in. */
  holder?: { url: string; schema: string }
}

export interface PeersOptions {
  seconds: number
  rounds: number
  connections: number
  /** Seconds of the untimed warm-up run of each cell. */
  warmupSeconds: number
  /**
   * Seconds of untimed load on a cell right before each timed run of it, with the same requests.
   * A target sits idle while the others run (a round of every cell takes longer than `pg`'s
   * default `idleTimeoutMillis` of 10 s), so its pool has let its connections go: without this the
   * timed run counts their reconnection and the re-preparation of its named statements, a cost
   * of the bench's order, not of a service under steady load (issue 21).
   */
  primeSeconds: number
  /** The reference service is also measured with this `REDIS_URL` (its cache in front of PostgreSQL). */
  redisUrl: string | undefined
  /**
   * The CLI of another build (`DIR/dist/cli/main.js`): its reference service is measured too, as
   * `service (against)`, in its own schema, interleaved with this build's: the before and after
   * of a change, in one run; with a Redis, its service with the Redis cache too
   * (`service + redis (against)`).
   */
  againstCli?: string | undefined
}

export interface PeersResult {
  cells: Figure[]
  targets: Figure[]
  notes: string[]
}

/**
 * The peers' shape (issue 21): the reference service (atomic-phases, with the Redis cache, and
 * `IDEMPOTENCY_STRATEGY=none`), the same charge route on plain Express 5 with no idempotency and
 * behind `oncely/express`, the same route behind a Redis library (`@node-idempotency/core`, when
 * a Redis answers), the same durable work written lean by hand (bench/baselines/lean-durable.ts:
 * what it costs on this machine without a library), and a minimal route with and without the guard; each cell (fresh,
 * replay, 409, 422) of every target interleaved with the others, round by round, so drift in
 * the machine's load falls on all alike. CPU and write syscalls are the target process's own,
 * from /proc; PostgreSQL's CPU is its backends' for the run's database.
 */
export async function peersBench(databaseUrl: string, options: PeersOptions): Promise<PeersResult> {
  const started: BenchProcess[] = []
  // Every start, settled or not: one that fails must not leave the others running past the finally.
  const starting: Array<Promise<unknown>> = []
  const start = (promise: Promise<BenchProcess>) => {
    const process = promise.then((p) => {
      started.push(p)
      return p
    })
    starting.push(process.catch(() => undefined))
    return process
  }
  const notes: string[] = []
  // On stderr: a quiet minute is hard to tell from a hang.
  const began = performance.now()
  const progress = (what: string) => process.stderr.write(`peers: ${what} (${((performance.now() - began) / 1000).toFixed(0)} s)\n`)
  const databaseCpu = backendsCpu(databaseUrl)
  const holds = createHolds(databaseUrl)
  let holdingProviderUrl: string | undefined
  try {
    const [provider, holdingProvider] = await Promise.all([
      start(startCli(['provider', '--port', '0', '--latency-ms', '0'])),
      start(startCli(['provider', '--port', '0', '--latency-ms', String(HOLD_MS)])),
    ])
    holdingProviderUrl = holdingProvider.url
    // Every service runs a relay on its schema's outbox, and a cell's events go to whichever relay
    // claims them first: a process that is not the one measured must not relay them, or the
    // measured one's CPU leaves part of its relay's work out. So `service none` has a schema of
    // its own, and the 409 cells' holders (whose claims never complete) run no relay. The service
    // and its cached twin share the holder's keys, and so one outbox: each relays some of the
    // other's events, alike for both.
    const serve = (strategy: string, providerUrl: string, env: Record<string, string> = {}, schema = SERVICE_SCHEMA) =>
      start(startCli(['serve', '--port', '0', '--database-url', databaseUrl, '--schema', schema, '--provider-url', providerUrl, '--strategy', strategy], env))
    // The other build in a schema of its own: its migrations may differ from this build's.
    const serveAgainst = (cli: string, providerUrl: string, env: Record<string, string> = {}) =>
      start(startProgram(cli, ['serve', '--port', '0', '--database-url', databaseUrl, '--schema', AGAINST_SCHEMA, '--provider-url', providerUrl], env))
    type Guard = 'none' | 'oncely' | 'redis peer'
    const guards: Record<Guard, string[]> = {
      none: [],
      oncely: ['--oncely', '--database-url', databaseUrl, '--schema', EXPRESS_SCHEMA],
      'redis peer': ['--redis-peer', options.redisUrl ?? '', '--redis-prefix', PEER_PREFIX],
    }
    const express = (providerUrl: string, guard: Guard, timeoutMs = 10_000) =>
      start(startProgram(EXPRESS_APP, ['--port', '0', '--provider-url', providerUrl, '--provider-timeout-ms', String(timeoutMs), ...guards[guard]]))
    // All at once: migrations that share a schema wait for each other under its lock.
    const [service, none, serviceHolder, redis, peer, plain, guarded, guardedHolder, lean] = await Promise.all([
      serve('atomic-phases', provider.url),
      serve('none', provider.url, {}, NONE_SCHEMA),
      // Its provider never answers (and it waits as long): its claims stay in flight.
      serve('atomic-phases', holdingProvider.url, { PROVIDER_LATENCY_MS: String(HOLD_MS), ONCELY_RELAY: 'false' }),
      options.redisUrl === undefined ? undefined : serve('atomic-phases', provider.url, { REDIS_URL: options.redisUrl }),
      options.redisUrl === undefined ? undefined : express(provider.url, 'redis peer'),
      express(provider.url, 'none'),
      express(provider.url, 'oncely'),
      express(holdingProvider.url, 'oncely', HOLD_MS),
      start(startProgram(LEAN_APP, ['--port', '0', '--provider-url', provider.url, '--database-url', databaseUrl, '--schema', LEAN_SCHEMA])),
    ])
    const { againstCli } = options
    const [against, againstHolder, againstRedis] =
      againstCli === undefined
        ? []
        : await Promise.all([
            serveAgainst(againstCli, provider.url),
            serveAgainst(againstCli, holdingProvider.url, { PROVIDER_LATENCY_MS: String(HOLD_MS), ONCELY_RELAY: 'false' }),
            options.redisUrl === undefined ? undefined : serveAgainst(againstCli, provider.url, { REDIS_URL: options.redisUrl }),
          ])
    if (!redis) notes.push('no Redis (--redis-url, REDIS_URL or redis://127.0.0.1:6379 did not answer): the Redis cells, the Redis peer and the replay targets are left out')

    const all = ['fresh', 'replay', 'conflict', 'mismatch'] as const
    const serviceHolds = { url: `${serviceHolder.url}/v1/charges`, schema: SERVICE_SCHEMA }
    const againstHolds = (holder: BenchProcess) => ({ url: `${holder.url}/v1/charges`, schema: AGAINST_SCHEMA })
    const targets: Target[] = [
      { name: 'express', process: plain, path: '/v1/charges', cells: ['fresh'] },
      { name: 'service none', process: none, path: '/v1/charges', cells: ['fresh'] },
      { name: 'service', process: service, path: '/v1/charges', cells: [...all, 'fresh-spread'], holder: serviceHolds },
      ...(against && againstHolder ? [{ name: AGAINST, process: against, path: '/v1/charges', cells: all, holder: againstHolds(againstHolder) }] : []),
      ...(redis ? [{ name: 'service + redis', process: redis, path: '/v1/charges', cells: all, holder: serviceHolds }] : []),
      ...(againstRedis && againstHolder ? [{ name: AGAINST_REDIS, process: againstRedis, path: '/v1/charges', cells: all, holder: againstHolds(againstHolder) }] : []),
      { name: 'express + oncely', process: guarded, path: '/v1/charges', cells: all, holder: { url: `${guardedHolder.url}/v1/charges`, schema: EXPRESS_SCHEMA } },
      ...(peer ? [{ name: 'redis peer', process: peer, path: '/v1/charges', cells: ['fresh', 'replay'] as const }] : []),
      { name: 'lean durable', process: lean, path: '/v1/charges', cells: ['fresh', 'replay', 'mismatch'] },
      { name: 'minimal', process: plain, path: '/v1/minimal', cells: ['fresh'] },
      { name: 'minimal + oncely', process: guarded, path: '/v1/minimal', cells: ['fresh'] },
    ]
    // The keys every replay and 422 is sent with: completed once, before any run.
    for (const target of targets) {
      if (target.cells.includes('replay')) await expectStatus(`${target.process.url}${target.path}`, 'bench-peers-done', 201)
    }
    const cells = targets.flatMap((target) => target.cells.map((cell) => ({ target, cell, name: `${target.name} ${cell}` })))
    const spread = spreadBodies(SPREAD_CUSTOMERS)
    const prepare = async ({ target, cell }: (typeof cells)[number]): Promise<{ key: string | undefined; body: string; bodies?: readonly string[] }> => {
      if (cell === 'fresh') return { key: undefined, body: BODY }
      if (cell === 'fresh-spread') return { key: undefined, body: BODY, bodies: spread }
      if (cell === 'replay') return { key: 'bench-peers-done', body: BODY }
      if (cell === 'mismatch') return { key: 'bench-peers-done', body: OTHER_BODY }
      if (!target.holder) throw new Error(`${target.name}: a 409 cell needs a holder`)
      return { key: await holds.hold(target.holder.url, target.holder.schema, `${target.process.url}${target.path}`), body: BODY }
    }
    const run = async (cell: (typeof cells)[number], seconds: number, primeSeconds = 0) => {
      const request = { ...(await prepare(cell)), expected: EXPECTED[cell.cell] }
      const target = { url: `${cell.target.process.url}${cell.target.path}`, process: cell.target.process, name: cell.name }
      if (primeSeconds > 0) await loadRun(target, request, { seconds: primeSeconds, connections: options.connections, databaseCpu })
      return loadRun(target, request, { seconds, connections: options.connections, databaseCpu })
    }
    progress(`${started.length} processes ready, ${cells.length} cells`)
    if (options.warmupSeconds > 0) for (const cell of cells) await run(cell, options.warmupSeconds)
    progress('warmed up')
    const runs = new Map<string, LoadRun[]>(cells.map((c) => [c.name, []]))
    await interleaved(options.rounds, cells, async (cell, round) => {
      runs.get(cell.name)?.push(await run(cell, options.seconds, options.primeSeconds))
      if (cell === cells[round % 2 === 0 ? cells.length - 1 : 0]) progress(`round ${round + 1} of ${options.rounds}`)
    })
    const measured: PeerCell[] = cells.map((c) => ({ target: c.target.name, cell: c.cell, runs: runs.get(c.name) ?? [] }))
    return { ...peerFigures(measured, options.connections), notes }
  } finally {
    await Promise.all(starting)
    await holds.release()
    await databaseCpu.close()
    // The never-answering provider first, killed: its graceful stop would wait 10 s on the
    // requests it holds; then the holders' requests fail at once, and they stop at once too.
    const holding = started.filter((p) => p.url === holdingProviderUrl)
    await Promise.all(holding.map((p) => p.kill()))
    await Promise.all(started.filter((p) => !holding.includes(p)).map((p) => p.stop()))
    progress('stopped')
    if (options.redisUrl) {
      await deleteRedisEntries(options.redisUrl, `oncely:${SERVICE_SCHEMA}:*`)
      await deleteRedisEntries(options.redisUrl, `oncely:${AGAINST_SCHEMA}:*`)
      await deleteRedisEntries(options.redisUrl, `${PEER_PREFIX}:*`)
    }
  }
}

/** The Redis to measure the cache with: the one given, or the machine's own if it answers. */
export async function findRedis(url: string | undefined): Promise<string | undefined> {
  const candidate = url ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  const { Redis } = await import('ioredis')
  const redis = new Redis(candidate, { maxRetriesPerRequest: 0, connectTimeout: 1000, retryStrategy: () => null, lazyConnect: true })
  redis.on('error', () => undefined)
  try {
    await redis.connect()
    return (await redis.ping()) === 'PONG' ? candidate : undefined
  } catch {
    return undefined
  } finally {
    redis.disconnect()
  }
}
