/**
 * `npm run bench`: what oncely costs, as ratios against a baseline measured in the same run
 * (docs/conventions.md, Tests), each beside its target from issue 11. Not a test: it prints and writes
 * bench/results/<time>.json, and never fails on a target.
 *
 *   npm run bench                          library, round trips, HTTP, relay and peers (a quarter of an hour)
 *   npm run bench -- --quick               the peers only, 2 rounds of 2 s (under about 2 minutes)
 *   npm run bench -- --only http           one part (library, round-trips, http, relay, peers, scale)
 *   npm run bench -- --redis               HTTP also with REDIS_URL (default redis://127.0.0.1:6379)
 *   npm run bench -- --scale               10 M rows and the sweeper under load, and 10 M rows
 *                                          hash-partitioned against plain (long, gigabytes)
 *   npm run bench -- --only scale --scale --rows 200000   the same on fewer rows (a quick check)
 *   npm run bench -- --only partitions     10 M rows in 16 hash partitions against a plain table
 *   npm run bench -- --only partitions --quick   the same on 100 000 rows (a smoke check)
 *   --partitions N   the partitioned table's partitions (default 16)
 *   --rows N         the scale and partitions parts' rows (default 10 000 000; with --quick 100 000)
 *   --seconds N --rounds N --connections N --iterations N
 *   --against DIR    the peers part also measures the reference service of the build in DIR
 *                    (`git worktree add DIR REV`, then `npm run build` there): before and after, in one run
 *
 * `DATABASE_URL` picks the PostgreSQL (a database of the run's own is created and dropped);
 * without it an embedded one is started.
 */
import { execFileSync } from 'node:child_process'
import { parseArgs } from 'node:util'
import { openBenchDatabase } from './database.js'
import { httpBench } from './http.js'
import { libraryBench } from './library.js'
import { partitionsBench } from './partitions.js'
import { planTable } from './partitions-plans.js'
import { findRedis, peersBench } from './peers.js'
import { builtCli } from './processes.js'
import { describeMachine, table, writeResults, type Figure } from './report.js'
import { roundTripBench } from './round-trips.js'
import { scaleBench } from './scale.js'

const PARTS = ['library', 'round-trips', 'http', 'relay', 'peers', 'scale', 'partitions'] as const

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    scale: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    redis: { type: 'boolean', default: false },
    'redis-url': { type: 'string' },
    seconds: { type: 'string' },
    rounds: { type: 'string' },
    connections: { type: 'string', default: '32' },
    iterations: { type: 'string' },
    rows: { type: 'string' },
    partitions: { type: 'string', default: '16' },
    against: { type: 'string' },
  },
})

// --quick: short runs, for development; its ratios are rougher, never a result to quote.
const quick = values.quick
const only = values.only?.split(',') ?? (quick ? ['peers'] : ['library', 'round-trips', 'http', 'relay', 'peers', ...(values.scale ? ['scale', 'partitions'] : [])])
for (const part of only) if (!(PARTS as readonly string[]).includes(part)) throw new Error(`--only: unknown part ${part}; one of ${PARTS.join(', ')}`)
const seconds = Number(values.seconds ?? (quick ? 2 : 5))
const rounds = Number(values.rounds ?? (quick ? 2 : 5))
const iterations = Number(values.iterations ?? (quick ? 100 : 500))
const connections = Number(values.connections)
const rows = Number(values.rows ?? (quick ? 100_000 : 10_000_000))
const againstCli = values.against === undefined ? undefined : builtCli(values.against)
if (againstCli !== undefined && !only.includes('peers')) throw new Error('--against is measured by the peers part: add peers to --only')
const redisUrl = values['redis-url'] ?? (values.redis ? (process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') : undefined)

const NOTE =
  'This machine\'s cores are shared by the load generator, PostgreSQL, every process measured (and other users): absolute figures are noisy. Each ratio compares two figures measured in the same run, interleaved; the ratios are what counts.'

const startedAt = new Date()
const database = await openBenchDatabase()
const sections: Record<string, Figure[]> = {}
const details: Record<string, unknown> = {}
const print = (title: string, figures: Figure[], extra: string[] = []) => {
  sections[title] = figures
  process.stdout.write(`\n### ${title}\n\n${table(figures, extra)}\n`)
}
try {
  const machine = describeMachine(database)
  process.stdout.write(`oncely bench: ${JSON.stringify(machine)}\n\n${NOTE}\n`)
  if (only.includes('library')) {
    print(`library level: ${connections} concurrent loops on one pool of ${connections}, ${rounds} interleaved runs of ${seconds} s`, await libraryBench(database.url, { concurrency: connections, seconds, rounds: Math.max(3, Math.ceil(rounds / 2)) }), ['baseline runs', 'CPU-ms/op', 'baseline CPU-ms/op'])
  }
  if (only.includes('round-trips')) {
    print(`round trips per outcome (${iterations} sequential iterations)`, await roundTripBench(database.url, { iterations }), ['statements', 'round trips', 'budget', 'within budget', 'sequence'])
  }
  if (only.includes('http')) {
    const figures = await httpBench(database.url, { seconds, rounds, connections, redisUrl, nodeOptions: [] })
    for (const section of new Set(figures.map((f) => f.section))) {
      const part = figures.filter((f) => f.section === section)
      print(`${section} (${rounds} interleaved runs of ${seconds} s each, median and min–max)`, part, Object.keys(part[0]?.extra ?? {}))
    }
  }
  if (only.includes('relay')) {
    // The outbox relay: drain throughput, commit-to-consumer latency with LISTEN and with polling
    // alone, a steady stream's claims and CPU per event, and NOTIFY's cost on commits. Its own
    // script, so it runs on its own too.
    process.stdout.write('\n### outbox relay (bench/relay.ts)\n\n')
    execFileSync(process.execPath, ['--import', 'tsx', 'bench/relay.ts'], { stdio: 'inherit', env: { ...process.env, DATABASE_URL: database.url } })
  }
  if (only.includes('peers')) {
    const peers = await peersBench(database.url, { seconds, rounds, connections, warmupSeconds: quick ? 0.5 : 2, primeSeconds: quick ? 0.5 : 1, redisUrl: await findRedis(values['redis-url']), againstCli })
    for (const note of peers.notes) process.stdout.write(`\nnote: ${note}\n`)
    print(`peers: every cell beside plain Express 5's fresh charges (${rounds} interleaved runs of ${seconds} s each, median and min–max)`, peers.cells, Object.keys(peers.cells[0]?.extra ?? {}))
    print('peers: the targets of issue 21 (one interleaved run; met or not, never failed on)', peers.targets)
  }
  if (only.includes('scale')) {
    const scale = await scaleBench(database.url, { rows, connections: 8, seconds, rounds })
    print(`scale: ${rows} rows, ${rounds} interleaved runs of ${seconds} s, 8 loops`, scale.figures, ['p50 ms', 'baseline p50 ms', 'ops', 'baseline ops'])
    details.scale = scale.details
    process.stdout.write(`\n${JSON.stringify(scale.details, null, 2)}\n`)
  }
  if (only.includes('partitions')) {
    const partitions = Number(values.partitions)
    const result = await partitionsBench(database.url, { rows, partitions, loops: 4, seconds, rounds })
    print(
      `partitions: ${rows} rows, ${partitions} hash partitions by scope against one plain table (${rounds} interleaved runs of ${seconds} s, 4 loops; ratio = partitioned ÷ plain)`,
      result.figures,
      ['plain runs', 'round trips', 'ops/s'],
    )
    process.stdout.write(`\n### partitions: the relations each statement's plan touches (scope bound)\n\n${planTable(result.plans)}\n`)
    const { plans, figures: _figures, ...rest } = result
    details.partitions = { ...rest, plans: plans.map((p) => ({ ...p, text: p.plan === 'custom' ? p.text : undefined })) }
    process.stdout.write(`\n${JSON.stringify(rest, null, 2)}\n`)
  }
  const file = await writeResults(startedAt, { startedAt: startedAt.toISOString(), finishedAt: new Date().toISOString(), machine, note: NOTE, options: values, sections, details })
  process.stdout.write(`\n${NOTE}\nwritten to ${file}\n`)
} finally {
  await database.close()
}
