/**
 * `node --import tsx bench/instructions.ts [--cell fresh,replay] [--strategy S] [--requests N] [--warm N] [--against DIR] [--body-file FILE]`:
 * the reference service's instructions per request on its main thread, counted by valgrind's
 * callgrind (issue 21). CPU time on a shared 2-core machine moves by ±10 % from run to run; an
 * instruction count of the same build, inputs and load moves by well under 1 %, whatever else the
 * machine is doing, so a change worth 3 % shows. Only the main thread is counted: the event loop
 * is what limits a Node process's requests per second; V8's compiler and GC helper threads run
 * beside it (their share varies from run to run).
 *
 * The service of this checkout's build (`dist/`, built first) runs under callgrind with counting
 * off; `--warm` requests (default 1 500) let V8 compile the hot path; counting is switched on for
 * `--requests` (default 1 000) sent one at a time, then off. One request at a time, so no count
 * depends on how many requests one turn of the event loop happened to take; `--concurrency N`
 * (default 1) keeps N in flight instead, so the work that batches under load (the store's claims
 * and completions, the relay's publishes) is counted as it is shared, not once per request.
 * `--against DIR` runs another checkout's build the same way (`git worktree add DIR REV`,
 * `npm run build` there) and prints the ratio: the before and after of a change. A fresh cell
 * sends a new key with every request, a replay one key completed before the count. `--strategy` runs the service with another
 * `IDEMPOTENCY_STRATEGY` (`none`: the same business work with no key at all, the share of a
 * fresh charge that is oncely's). `--target express-minimal` counts the peers' Express app
 * (bench/baselines/express-app.ts, of each checkout) on `POST /v1/minimal` instead, with
 * `oncely/express` in front (`express-minimal-plain`: without it), the guard's own cost per
 * request; `express-charges` its charges route behind the guard (`express-charges-plain`: the
 * same route without it, plain Express's fresh charge of the peers); `lean` the lean durable
 * baseline (bench/baselines/lean-durable.ts), the floor the service's fresh charge is read
 * against. `--body-file FILE` sends the JSON in FILE instead of the 55-byte charge, on the
 * `express-minimal` targets only (the charge routes refuse any other body): what a larger body
 * costs the guard (its fingerprint). With `REDIS_URL` in its environment the service counts replays from its Redis cache
 * (signed with `ONCELY_CACHE_SECRET`, or a fixed secret of the bench's), but not reliably: one
 * build read 0.50–0.72 M on 2026-12-07, most likely because at valgrind's pace a read sometimes
 * outlasts the cache's 100 ms timeout and the replay falls through to PostgreSQL (not counted).
 * Fresh charges with `REDIS_URL` are no better: one build of 7a837c5 read 1.53 M and 0.98 M at
 * `--concurrency 16` in two runs an hour apart, and 0.43 M with the cache's timeout raised to 60 s
 * (the service without the cache: 1.15–1.24 M). Do not compare builds with them.
 * A request answered 503 (at valgrind's pace, the service's 1 s deadline for a pool connection can
 * pass) is sent again; the table says how many counted requests were, and more than 1 % of them
 * refuses the count.
 * Valgrind slows the process about fifty times: a cell takes a minute or two. Needs `valgrind`
 * (Debian's package) on the PATH.
 */
import { execFileSync, spawn } from 'node:child_process'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { waitForReadyLine, type ChildExit } from '../src/cli/ready-line.js'
import { openBenchDatabase } from './database.js'
import { builtCli, startCli } from './processes.js'

const { values } = parseArgs({ options: { cell: { type: 'string', default: 'fresh,replay' }, requests: { type: 'string', default: '1000' }, concurrency: { type: 'string', default: '1' }, warm: { type: 'string', default: '1500' }, against: { type: 'string' }, strategy: { type: 'string', default: 'atomic-phases' }, target: { type: 'string', default: 'service' }, 'body-file': { type: 'string' } } })
const cells = values.cell.split(',')
for (const cell of cells) if (cell !== 'fresh' && cell !== 'replay') throw new Error(`--cell takes fresh and replay, not ${cell}`)
const TARGETS = ['service', 'express-minimal', 'express-minimal-plain', 'express-charges', 'express-charges-plain', 'lean']
if (!TARGETS.includes(values.target)) throw new Error(`--target is one of ${TARGETS.join(', ')}, not ${values.target}`)
// The service refuses any body but a charge's; the Express app's minimal route takes any JSON.
if (values['body-file'] !== undefined && !values.target.startsWith('express-minimal')) throw new Error('--body-file is for --target express-minimal and express-minimal-plain: the others take only a charge')
const body = values['body-file'] === undefined ? '{"amount":1000,"currency":"usd","customer":"cus_bench"}' : await readFile(values['body-file'], 'utf8')
const requests = positive('--requests', values.requests)
const warm = positive('--warm', values.warm)
const concurrency = positive('--concurrency', values.concurrency)
try {
  execFileSync('valgrind', ['--version'], { stdio: 'ignore' })
} catch {
  throw new Error('bench/instructions.ts needs valgrind on the PATH (Debian: apt-get install -y valgrind)')
}
const here = fileURLToPath(new URL('..', import.meta.url))
// Each build's CLI; the other checkout's is refused here, before the database and valgrind start, when it has no build.
const builds: Array<[string, string]> = [['this checkout', path.join(here, 'dist/cli/main.js')]]
if (values.against !== undefined) builds.push([`--against ${values.against}`, builtCli(values.against)])
const express = values.target.startsWith('express-')

const database = await openBenchDatabase()
const provider = await startCli(['provider', '--port', '0', '--latency-ms', '0'])
try {
  const counts = new Map<string, { perRequest: number; resent: number }>()
  for (const cell of cells) for (const [index, [name, cli]] of builds.entries()) counts.set(`${cell} ${name}`, await count(cli, cell, index))
  const ratios = values.against !== undefined
  process.stdout.write(`\n| cell | build | instructions per request, main thread |${ratios ? ' ratio |' : ''} counted requests sent again after a 503 |\n| --- | --- | ---: |${ratios ? ' ---: |' : ''} ---: |\n`)
  for (const cell of cells) {
    const against = counts.get(`${cell} ${builds[1]?.[0]}`)?.perRequest
    for (const [name] of builds) {
      const { perRequest, resent } = counts.get(`${cell} ${name}`) ?? { perRequest: 0, resent: 0 }
      process.stdout.write(`| ${cell} | ${name} | ${Math.round(perRequest).toLocaleString('en')} |${against === undefined ? '' : ` ${(perRequest / against).toFixed(3)}× |`} ${resent} |\n`)
    }
  }
} finally {
  await provider.stop()
  await database.close()
}

/** Main-thread instructions per request of the service of the CLI `cli` on `cell`, and how many counted requests were sent again after a 503. */
async function count(cli: string, cell: string, index: number): Promise<{ perRequest: number; resent: number }> {
  const directory = await mkdtemp(path.join(tmpdir(), 'oncely-instructions-'))
  const schema = `bench_instructions_${index}_${cell}`
  // The Express app of the checkout `cli` belongs to (dist/cli/main.js, two folders down), which imports that checkout's dist/.
  const baselines = path.resolve(cli, '../../../bench/baselines')
  const program = express
    ? ['--import', 'tsx', path.join(baselines, 'express-app.ts'), ...(values.target.endsWith('-plain') ? [] : ['--oncely', '--database-url', database.url, '--schema', schema]), '--provider-url', provider.url]
    : values.target === 'lean'
    ? ['--import', 'tsx', path.join(baselines, 'lean-durable.ts'), '--port', '0', '--database-url', database.url, '--schema', schema, '--provider-url', provider.url]
    : [cli, 'serve', '--port', '0', '--database-url', database.url, '--schema', schema, '--provider-url', provider.url, '--strategy', values.strategy]
  // With REDIS_URL the service caches replays, signing entries with ONCELY_CACHE_SECRET, else with
  // a secret of its own process: an entry an earlier run left under the same schema would then
  // never verify, nor be replaced (the cache's fill writes with NX), and every replay counted
  // would be a miss (read in the cache's code, not reproduced). One secret for every run.
  const env = { ...process.env, ONCELY_CACHE_SECRET: process.env.ONCELY_CACHE_SECRET ?? 'bench/instructions.ts: one secret for every run' }
  const child = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', '--separate-threads=yes', `--callgrind-out-file=${directory}/out.%p`, process.execPath, ...program], { stdio: ['ignore', 'pipe', 'pipe'], env })
  let output = ''
  // The service's own lines, apart: the relay's log publisher writes a line per event, which
  // would push a warning about a 503's cause out of `output` within a few requests.
  let partial = ''
  const serviceLines: string[] = []
  const keep = (chunk: string) => {
    output = (output + chunk).slice(-16_384)
    const lines = (partial + chunk).split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) if (line !== '' && !line.startsWith('event ')) serviceLines.push(line.slice(0, 1_000))
    serviceLines.splice(0, serviceLines.length - 20)
  }
  child.stdout.setEncoding('utf8').on('data', keep)
  child.stderr.setEncoding('utf8').on('data', keep)
  const exited = new Promise<ChildExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  try {
    // Valgrind starts a Node process slowly: minutes, not seconds, on a loaded machine.
    const url = `${await waitForReadyLine(child, { output: () => output, exited, timeoutMs: 300_000, describe: () => `the service of ${cli} under callgrind\n${output}` })}/v1/${values.target.startsWith('express-minimal') ? 'minimal' : 'charges'}`
    let sent = 0
    /** Resolves to the answer's status and body; anything but a 201 is the caller's to judge. */
    const send = async (key: string) => {
      const answer = await fetch(url, { method: 'POST', body, headers: { authorization: 'Bearer demo_7', 'content-type': 'application/json', 'idempotency-key': key } })
      return { status: answer.status, text: await answer.text() }
    }
    const serviceLog = () => serviceLines.join('\n')
    // `concurrency` senders, each one request at a time, share the n requests. A 503 is sent
    // again, 250 ms later: at valgrind's pace, a request waiting for one of the pool's connections
    // (or for a new one to open) can outlast the service's 1 s deadline for it, most of all once
    // counting slows the process further (seen at `--concurrency 16` with `--strategy none`, whose
    // charges hold a connection across the provider's call: "the connection to PostgreSQL failed
    // during a connection", at the same request in two runs). A counted request sent again adds
    // its instructions to the count: the table says how many were, and more than 1 % refuses it.
    let resent = 0
    const run = async (n: number, counting: boolean) => {
      let left = n
      const sender = async () => {
        while (left > 0) {
          left--
          const key = cell === 'replay' ? 'replayed' : `fresh-${sent++}`
          let answer = await send(key)
          for (let retry = 0; answer.status === 503 && retry < 20; retry++) {
            if (counting) resent++
            await new Promise((resolve) => setTimeout(resolve, 250))
            answer = await send(key)
          }
          // The answer says what the client saw; the service's log says which deadline or fault it was.
          if (answer.status !== 201) throw new Error(`${cli}: ${cell} answered ${answer.status}: ${answer.text.slice(0, 500)}\nthe service's last lines:\n${serviceLog()}`)
        }
      }
      await Promise.all(Array.from({ length: concurrency }, sender))
    }
    await run(warm, false)
    const pid = String(child.pid)
    execFileSync('callgrind_control', ['--zero', pid], { stdio: 'ignore' })
    execFileSync('callgrind_control', ['--instr=on', pid], { stdio: 'ignore' })
    await run(requests, true)
    execFileSync('callgrind_control', ['--instr=off', pid], { stdio: 'ignore' })
    execFileSync('callgrind_control', ['--dump', pid], { stdio: 'ignore' })
    // With --separate-threads each thread has its own file; the main thread's ends in -01.
    const files = (await readdir(directory)).filter((file) => /\.\d+-01$/.test(file))
    if (files.length !== 1) throw new Error(`callgrind wrote ${files.length} main-thread dumps in ${directory}: ${files.join(', ')}`)
    const totals = /^totals: (\d+)/m.exec(await readFile(path.join(directory, files[0]!), 'utf8'))
    if (!totals) throw new Error(`no totals in ${files[0]}`)
    if (resent > requests / 100) throw new Error(`${cli}: ${cell}: ${resent} of ${requests} counted requests answered 503 and were sent again; a count with more than 1 % of them is not one build's cost\nthe service's last lines:\n${serviceLog()}`)
    return { perRequest: Number(totals[1]) / requests, resent }
  } finally {
    child.kill('SIGKILL')
    await exited
    await rm(directory, { recursive: true, force: true })
  }
}

function positive(flag: string, text: string): number {
  const n = Number(text)
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${flag} takes a positive whole number, not ${text}`)
  return n
}
