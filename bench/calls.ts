/**
 * `node --import tsx bench/calls.ts [--calls N] [--rounds N] [--against DIR]`: the CPU of calls
 * every guarded request makes, in µs per call, on inputs the peers' bench never varies (issue 21):
 * its bodies are 55 bytes and all alike, a real API's are larger and each its own.
 *
 * - `metrics.onOutcome`: with the repeated-payload detector off (the baseline), with one payload
 *   sent again and again under new keys (what the peers' bench sends), and with a distinct
 *   payload every time and the detector full (10 000 entries, its default bound).
 * - `currentFingerprint`, what the adapters hash a request with: the peers' 55-byte charge body
 *   and a 1.7 KB order (bench/baselines/order.json: twenty metadata fields, ten line items).
 *
 * Each shape runs on objects of its own, warmed with 20 000 calls, then `--rounds` rounds of
 * `--calls` calls each, interleaved. `--against DIR` runs the same on the build in `DIR` (`git
 * worktree add DIR REV`, `npm run build` there) and prints each shape's ratio to it: a change's
 * before and after in one run.
 */
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { currentFingerprint as CurrentFingerprint } from '../src/index.js'
import type { createMetrics as CreateMetrics, RequestOutcomeEvent } from '../src/ops/metrics.js'
import { median, range } from './stats.js'

const { values } = parseArgs({ options: { calls: { type: 'string', default: '200000' }, rounds: { type: 'string', default: '5' }, against: { type: 'string' } } })
const calls = Number(values.calls)
const rounds = Number(values.rounds)
if (!Number.isSafeInteger(calls) || calls < 1) throw new Error(`--calls must be a positive integer, not ${values.calls}`)
if (!Number.isSafeInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a positive integer, not ${values.rounds}`)

interface Build {
  name: string
  createMetrics: typeof CreateMetrics
  currentFingerprint: typeof CurrentFingerprint
}
async function load(name: string, dir: string): Promise<Build> {
  const built = (file: string) => import(pathToFileURL(path.resolve(dir, 'dist', file)).href)
  const [{ createMetrics }, { currentFingerprint }] = (await Promise.all([built('ops/metrics.js'), built('index.js')])) as [{ createMetrics: typeof CreateMetrics }, { currentFingerprint: typeof CurrentFingerprint }]
  return { name, createMetrics, currentFingerprint }
}
// This checkout's build, wherever the script is run from.
const builds = [await load('this checkout', fileURLToPath(new URL('..', import.meta.url)))]
if (values.against !== undefined) builds.push(await load(`--against ${values.against}`, values.against))

const SHAPES = ['onOutcome, detector off', 'onOutcome, one payload repeated', 'onOutcome, distinct payloads, detector full', 'currentFingerprint, 55-byte body', 'currentFingerprint, 1.7 KB body'] as const
type Shape = (typeof SHAPES)[number]

const outcome = (n: number, fingerprint: string): RequestOutcomeEvent => ({ outcome: 'created', durationMs: 12, status: 201, route: 'POST /v1/charges', scope: '7', key: `key-${n}`, fingerprint })
const chargeBody = { amount: 1000, currency: 'usd', customer: 'cus_bench' }
/** The 1.7 KB order (bench/baselines/order.json), also what `bench/instructions.ts --body-file` can send. */
const orderBody = JSON.parse(await readFile(new URL('./baselines/order.json', import.meta.url), 'utf8')) as unknown

/** One call of `shape` on `build`, given the call's number. */
function caller(build: Build, shape: Shape): (n: number) => unknown {
  if (shape.startsWith('currentFingerprint')) {
    const body = shape.endsWith('55-byte body') ? chargeBody : orderBody
    return () => build.currentFingerprint({ method: 'POST', route: '/v1/charges', body })
  }
  const metrics = build.createMetrics({ log: () => undefined, repeatedPayloads: shape === 'onOutcome, detector off' ? false : { windowMs: 60_000, maxEntries: 10_000 } })
  const distinct = shape === 'onOutcome, distinct payloads, detector full'
  return (n) => metrics.onOutcome(outcome(n, distinct ? `v2:${'f'.repeat(40)}${n}` : `v2:${'f'.repeat(40)}`))
}

/** µs of CPU per call over `count` calls, numbered on from the last. */
function runner(call: (n: number) => unknown): (count: number) => number {
  let n = 0
  return (count) => {
    const start = process.cpuUsage()
    for (const end = n + count; n < end; n++) call(n)
    const used = process.cpuUsage(start)
    return (used.user + used.system) / count
  }
}

const runs = new Map<string, { run: (count: number) => number; samples: number[] }>()
const id = (shape: Shape, build: Build | undefined) => `${shape}\u0000${build?.name}`
for (const build of builds) for (const shape of SHAPES) runs.set(id(shape, build), { run: runner(caller(build, shape)), samples: [] })
for (const { run } of runs.values()) run(20_000)
for (let round = 0; round < rounds; round++) for (const entry of runs.values()) entry.samples.push(entry.run(calls))

const against = builds[1]
process.stdout.write(`\n| call | build | µs of CPU per call, median (min–max) |${against === undefined ? '' : ' ÷ --against |'}\n| --- | --- | ---: |${against === undefined ? '' : ' ---: |'}\n`)
for (const shape of SHAPES) {
  for (const build of builds) {
    const samples = runs.get(id(shape, build))?.samples ?? []
    const [low, high] = range(samples)
    const ratio = against === undefined ? '' : ` ${(median(samples) / median(runs.get(id(shape, against))?.samples ?? [])).toFixed(2)}× |`
    process.stdout.write(`| ${shape} | ${build.name} | ${median(samples).toFixed(2)} (${low.toFixed(2)}–${high.toFixed(2)}) |${ratio}\n`)
  }
}
