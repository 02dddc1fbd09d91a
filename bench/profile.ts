/**
 * `node --import tsx bench/profile.ts [--strategy S] [--seconds N]`: runs the reference service
 * under `node --cpu-prof`, loads it with fresh charges (32 connections), stops it, and prints
 * where its CPU went: self time by package or source file, and the top functions. What issue 11
 * asks to look at before changing the hot path. `--callers NAME` adds the call stacks (three
 * frames up) under which functions of that name spent their self time: who calls a hot native
 * such as `writev`. `--save FILE` keeps the `.cpuprofile` (for Chrome's DevTools, or another look).
 * `--target express-minimal` profiles `oncely/express` alone instead: the peers' Express app
 * (bench/baselines/express-app.ts) with the guard on `POST /v1/minimal`, which answers and does
 * nothing else, so what is left is the guard's own cost per fresh key. `--target express-charges`
 * profiles the same app's `POST /v1/charges` behind the guard (the peers' `express + oncely`: a
 * step around the provider call, the charge row written with the completion). `--target lean` profiles the
 * lean durable baseline (bench/baselines/lean-durable.ts) under the same load, the floor to read
 * the service's profile against. `--replay` sends one key, completed before the load, with every
 * request: the profile of a replay instead of a fresh charge. `--redis-url URL` gives the service
 * its Redis cache (`REDIS_URL`). `--allocations` samples what the target allocates instead of where
 * its time goes (bench/allocation-sampler.mjs, after a 2 s warm-up, objects collected since kept),
 * and prints kilobytes per request by package or file and by function: what its garbage collection
 * is made of.
 */
import { access, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import autocannon from 'autocannon'
import { openBenchDatabase } from './database.js'
import { startCli, startProgram } from './processes.js'

interface ProfileNode {
  id: number
  children?: number[]
  callFrame: { functionName: string; url: string; lineNumber: number }
  hitCount?: number
}
interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}
/** V8's sampling heap profile: a tree of call frames, each with the bytes sampled in it. */
interface AllocationNode {
  callFrame: ProfileNode['callFrame']
  selfSize: number
  children: AllocationNode[]
}
/** What was spent in one call frame: milliseconds of self time, or bytes allocated. */
interface Spent {
  node: Pick<ProfileNode, 'id' | 'callFrame'>
  amount: number
}

const { values } = parseArgs({ options: { target: { type: 'string', default: 'service' }, strategy: { type: 'string', default: 'atomic-phases' }, seconds: { type: 'string', default: '10' }, top: { type: 'string', default: '25' }, callers: { type: 'string' }, save: { type: 'string' }, replay: { type: 'boolean', default: false }, 'redis-url': { type: 'string' }, allocations: { type: 'boolean', default: false } } })
const database = await openBenchDatabase()
const directory = await mkdtemp(path.join(tmpdir(), 'oncely-profile-'))
const provider = await startCli(['provider', '--port', '0', '--latency-ms', '0'])
try {
  const allocationsFile = path.join(directory, 'allocations.json')
  const profiled = values.allocations ? ['--import', new URL('./allocation-sampler.mjs', import.meta.url).pathname] : ['--cpu-prof', `--cpu-prof-dir=${directory}`]
  if (values.allocations) process.env.ONCELY_ALLOCATIONS_FILE = allocationsFile
  const targets = ['service', 'express-minimal', 'express-charges', 'lean']
  if (!targets.includes(values.target)) throw new Error(`--target is one of ${targets.join(', ')}, not ${values.target}`)
  const minimal = values.target === 'express-minimal'
  const express = minimal || values.target === 'express-charges'
  const service = values.target === 'lean'
    ? await startProgram(new URL('./baselines/lean-durable.ts', import.meta.url).pathname, ['--port', '0', '--database-url', database.url, '--schema', 'bench_profile_lean', '--provider-url', provider.url], {}, profiled)
    : express
    ? await startProgram(new URL('./baselines/express-app.ts', import.meta.url).pathname, ['--oncely', '--database-url', database.url, '--schema', 'bench_profile_minimal', '--provider-url', provider.url], {}, profiled)
    : await startCli(['serve', '--port', '0', '--database-url', database.url, '--schema', 'bench_profile', '--provider-url', provider.url, '--strategy', values.strategy], values['redis-url'] === undefined ? {} : { REDIS_URL: values['redis-url'] }, profiled)
  let n = 0
  const headers = (key: string) => ({ authorization: 'Bearer demo_7', 'content-type': 'application/json', 'idempotency-key': key })
  const url = `${service.url}/v1/${minimal ? 'minimal' : 'charges'}`
  const body = '{"amount":1000,"currency":"usd","customer":"cus_bench"}'
  if (values.replay) {
    const first = await fetch(url, { method: 'POST', body, headers: headers('p-replay') })
    if (first.status !== 201) throw new Error(`the key to replay was answered ${first.status}: ${await first.text()}`)
  }
  const load = (seconds: number) =>
    autocannon({
      url,
      connections: 32,
      duration: seconds,
      requests: [{ method: 'POST', body, headers: headers('p-replay'), setupRequest: (request) => (values.replay ? request : { ...request, headers: headers(`p-${n++}`) }) }],
    })
  if (values.allocations) {
    // Compiled and warmed first, so what is sampled is the steady state, not start-up.
    await load(2)
    process.kill(service.pid, 'SIGUSR2')
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  const result = await load(Number(values.seconds))
  if (values.allocations) {
    process.kill(service.pid, 'SIGUSR2')
    await waitForFile(allocationsFile)
  }
  await service.stop()
  process.stdout.write(`${values.target === 'service' ? values.strategy : values.target}${values.replay ? ', replay' : ''}: ${(result.requests.total / result.duration).toFixed(0)} req/s, statuses ${JSON.stringify(result.statusCodeStats)}\n`)
  const file = values.allocations ? 'allocations.json' : (await readdir(directory)).find((f) => f.endsWith('.cpuprofile'))
  if (!file) throw new Error('the service wrote no profile')
  const text = await readFile(path.join(directory, file), 'utf8')
  if (values.save !== undefined) await writeFile(values.save, text)
  if (values.allocations) summariseAllocations(JSON.parse(text) as { head: AllocationNode }, result.requests.total, Number(values.top))
  else summarise(JSON.parse(text) as Profile, Number(values.top), values.callers)
} finally {
  await provider.stop()
  await database.close()
  await rm(directory, { recursive: true, force: true })
}

function summarise(profile: Profile, top: number, callers: string | undefined): void {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const selfMs = new Map<number, number>()
  profile.samples.forEach((id, i) => selfMs.set(id, (selfMs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000))
  const spent = [...selfMs].flatMap(([id, amount]) => {
    const node = byId.get(id)
    return node ? [{ node, amount }] : []
  })
  const total = spent.reduce((sum, { amount }) => sum + amount, 0)
  const { group, print } = report(spent, top, (ms) => `${((ms / total) * 100).toFixed(1).padStart(5)} %`)
  print(`self time by package or file (of ${total.toFixed(0)} ms sampled)`, group(where))
  print('top functions by self time', group(frame))
  if (callers === undefined) return
  const parentOf = new Map<number, ProfileNode>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node)
  const stack = (node: Spent['node']) => {
    const frames: string[] = []
    // Node's own stream and socket frames say nothing about who wrote: skip them.
    for (let up = parentOf.get(node.id); up && frames.length < 3; up = parentOf.get(up.id)) if (!up.callFrame.url.startsWith('node:')) frames.push(frame(up))
    return frames.join('  <  ')
  }
  print(`where ${callers} spent its self time (three callers up, past Node's own)`, group((node) => (node.callFrame.functionName === callers ? stack(node) : '(other)')).filter(([name]) => name !== '(other)'))
}

/** Where a frame's code lives: a package, a node: module, a file of this project, or a native. */
function where(node: Pick<ProfileNode, 'callFrame'>): string {
  const url = node.callFrame.url
  if (url === '') return `(${node.callFrame.functionName || 'native'})`
  const modules = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (modules?.[1]) return modules[1]
  if (url.startsWith('node:')) return url
  return url.replace(/^.*\/src\//, 'src/').replace(/^.*\/dist\//, 'dist/')
}

function frame(node: Pick<ProfileNode, 'callFrame'>): string {
  return `${node.callFrame.functionName || '(anonymous)'}  ${where(node)}:${node.callFrame.lineNumber + 1}`
}

/** Sums of `spent` grouped by a name made of each frame, largest first, and a printer of them. */
function report(spent: Spent[], top: number, format: (amount: number) => string) {
  const group = (key: (node: Spent['node']) => string): Array<[string, number]> => {
    const sums = new Map<string, number>()
    for (const { node, amount } of spent) sums.set(key(node), (sums.get(key(node)) ?? 0) + amount)
    return [...sums].sort((a, b) => b[1] - a[1]).slice(0, top)
  }
  const print = (title: string, rows: Array<[string, number]>) => {
    process.stdout.write(`\n${title}\n`)
    for (const [name, amount] of rows) process.stdout.write(`${format(amount)}  ${name}\n`)
  }
  return { group, print }
}

/** The allocation profile's bytes per request, by package or file and by function. */
function summariseAllocations(profile: { head: AllocationNode }, requests: number, top: number): void {
  const spent: Spent[] = []
  const walk = (node: AllocationNode) => {
    if (node.selfSize > 0) spent.push({ node: { id: spent.length, callFrame: node.callFrame }, amount: node.selfSize })
    node.children.forEach(walk)
  }
  walk(profile.head)
  const total = spent.reduce((sum, { amount }) => sum + amount, 0)
  const { group, print } = report(spent, top, (bytes) => `${(bytes / requests / 1024).toFixed(2).padStart(7)} KB`)
  print(`allocated per request by package or file (${(total / requests / 1024).toFixed(1)} KB sampled per request, ${requests} requests)`, group(where))
  print('allocated per request by function', group(frame))
}

/** Resolves once `file` exists (the sampler renames it into place whole), or throws after 30 s. */
async function waitForFile(file: string): Promise<void> {
  for (const startedAt = Date.now(); Date.now() - startedAt < 30_000; await new Promise((resolve) => setTimeout(resolve, 100))) {
    try {
      return await access(file)
    } catch {
      // Not yet written.
    }
  }
  throw new Error(`the allocation sampler wrote no ${file} within 30 s`)
}
