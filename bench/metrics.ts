/**
 * `node --import tsx bench/metrics.ts [--events N] [--rounds N] [--against DIR]`: what
 * `metrics.onOutcome` costs a request, in µs of this process's CPU per call (issue 21). Three
 * shapes, interleaved round by round: the repeated-payload detector off (the baseline: the
 * counters and the histogram alone); one payload sent again and again under new keys (what the
 * peers' bench sends, one body for every charge); and a distinct payload every time with the
 * detector full (10 000 entries, its default bound), as a real API's traffic is. Each shape runs
 * on a metrics object of its own, warmed with 20 000 calls first. `--against DIR` runs the same
 * on the build in `DIR` (`git worktree add DIR REV`, `npm run build` there) and prints each
 * shape's ratio to it: a change's before and after in one run.
 */
import path from 'node:path'
import { parseArgs } from 'node:util'
import { pathToFileURL } from 'node:url'
import type { createMetrics as CreateMetrics, RequestOutcomeEvent } from '../src/ops/metrics.js'
import { median, range } from './stats.js'

const { values } = parseArgs({ options: { events: { type: 'string', default: '200000' }, rounds: { type: 'string', default: '5' }, against: { type: 'string' } } })
const events = Number(values.events)
const rounds = Number(values.rounds)
if (!Number.isSafeInteger(events) || events < 1) throw new Error(`--events must be a positive integer, not ${values.events}`)
if (!Number.isSafeInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a positive integer, not ${values.rounds}`)

const load = async (dir: string): Promise<typeof CreateMetrics> =>
  ((await import(pathToFileURL(path.resolve(dir, 'dist/ops/metrics.js')).href)) as { createMetrics: typeof CreateMetrics }).createMetrics
const builds: Array<[string, typeof CreateMetrics]> = [['this checkout', await load('.')]]
if (values.against !== undefined) builds.push([`--against ${values.against}`, await load(values.against)])

const SHAPES = ['detector off', 'one payload repeated', 'distinct payloads, detector full'] as const
type Shape = (typeof SHAPES)[number]
const event = (n: number, fingerprint: string): RequestOutcomeEvent => ({ outcome: 'created', durationMs: 12, status: 201, route: 'POST /v1/charges', scope: '7', key: `key-${n}`, fingerprint })

/** A shape's calls from `from` on: each returns the µs of CPU per call over `count` calls. */
function runner(createMetrics: typeof CreateMetrics, shape: Shape): (count: number) => number {
  const metrics = createMetrics({ log: () => undefined, repeatedPayloads: shape === 'detector off' ? false : { windowMs: 60_000, maxEntries: 10_000 } })
  let n = 0
  const fingerprints = (i: number) => (shape === 'distinct payloads, detector full' ? `v2:${'f'.repeat(40)}${i}` : `v2:${'f'.repeat(40)}`)
  return (count) => {
    const start = process.cpuUsage()
    for (const end = n + count; n < end; n++) metrics.onOutcome(event(n, fingerprints(n)))
    const used = process.cpuUsage(start)
    return (used.user + used.system) / count
  }
}

const runs = new Map<string, { run: (count: number) => number; samples: number[] }>()
for (const [name, createMetrics] of builds) for (const shape of SHAPES) runs.set(`${shape}\u0000${name}`, { run: runner(createMetrics, shape), samples: [] })
for (const { run } of runs.values()) run(20_000)
for (let round = 0; round < rounds; round++) for (const entry of runs.values()) entry.samples.push(entry.run(events))

const baseline = (name: string) => median(runs.get(`detector off\u0000${name}`)?.samples ?? [])
process.stdout.write(`\n| shape | build | µs of CPU per onOutcome, median (min–max) | ÷ detector off |${builds.length > 1 ? ' ÷ --against |' : ''}\n| --- | --- | ---: | ---: |${builds.length > 1 ? ' ---: |' : ''}\n`)
for (const shape of SHAPES) {
  for (const [name] of builds) {
    const { samples } = runs.get(`${shape}\u0000${name}`) as { samples: number[] }
    const [low, high] = range(samples)
    const against = builds.length > 1 ? median(runs.get(`${shape}\u0000${builds[1]?.[0]}`)?.samples ?? []) : undefined
    process.stdout.write(
      `| ${shape} | ${name} | ${median(samples).toFixed(2)} (${low.toFixed(2)}–${high.toFixed(2)}) | ${(median(samples) / baseline(name)).toFixed(2)}× |${against === undefined ? '' : ` ${(median(samples) / against).toFixed(2)}× |`}\n`,
    )
  }
}
