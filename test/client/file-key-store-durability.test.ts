import { spawn, spawnSync } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { trackOpenHandle } from '../setup/guard-open-handles.js'
import { REPO_ROOT, TSX } from './support/node-process.js'

// Issue 22 point 4: a claim resolves only once the record it returns survives a crash of the
// machine (KeyStore.claim), so the directory entry must be fsynced even when the record was
// published by someone else: a claim that lost the link race, or found the record already there,
// may read a name another process linked and has not fsynced yet. The store's system calls are
// observed for real, with strace, in a child process: no seam in the store, nothing mocked.
const hasStrace = spawnSync('strace', ['-f', '-qq', '-o', '/dev/null', 'true']).status === 0
const directories: string[] = []
afterAll(async () => {
  await Promise.all(directories.map((directory) => rm(directory, { recursive: true, force: true })))
})

/** One system call as strace printed it, its unfinished and resumed halves joined. */
interface Call {
  readonly text: string
}

async function traceSteps(): Promise<{ keys: string; phases: Map<string, Call[]> }> {
  const parent = await mkdtemp(path.join(tmpdir(), 'oncely-fsync-'))
  directories.push(parent)
  const keys = path.join(parent, 'keys')
  const trace = path.join(parent, 'trace')
  const script = path.join(REPO_ROOT, 'test/client/fixtures/key-store-steps.ts')
  const args = ['-f', '-y', '-qq', '-e', 'trace=openat,fsync,fdatasync,link,linkat,rename,renameat,renameat2,write', '-o', trace, process.execPath, '--import', TSX, script, keys]
  const untrack = trackOpenHandle('strace of key-store-steps.ts')
  const child = spawn('strace', args, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  child.stdout.resume()
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', resolve)
  }).finally(untrack)
  expect(code, stderr).toBe(0)
  return { keys, phases: splitByStep(await readFile(trace, 'utf8'), keys) }
}

/** The store's calls on `keys` between the fixture's `step:NAME` lines, by the step they lead to. */
function splitByStep(trace: string, keys: string): Map<string, Call[]> {
  const pending = new Map<string, string>()
  const phases = new Map<string, Call[]>()
  let current: Call[] = []
  for (const line of trace.split('\n')) {
    const match = /^(\d+)\s+(.*)$/.exec(line)
    if (!match) continue
    const [, pid = '', rest = ''] = match
    if (rest.endsWith('<unfinished ...>')) {
      pending.set(pid, rest.slice(0, -'<unfinished ...>'.length))
      continue
    }
    const resumed = /^<\.\.\. \w+ resumed>(.*)$/.exec(rest)
    // A resumed call is printed with padding before its closing parenthesis: dropped.
    const text = (resumed ? (pending.get(pid) ?? '') + (resumed[1] ?? '') : rest).replace(/ +\)/g, ')').replace(/ {2,}/g, ' ')
    if (resumed) pending.delete(pid)
    const step = /"step:([a-z-]+)\\n"/.exec(text)?.[1]
    if (step) {
      phases.set(step, current)
      current = []
    } else if (text.includes(keys)) {
      current.push({ text })
    }
  }
  return phases
}

/** Indexes of the calls that fsynced the directory itself (not a file in it), successfully. */
function directoryFsyncs(calls: readonly Call[], keys: string): number[] {
  const indexes: number[] = []
  calls.forEach((call, index) => {
    if (call.text.startsWith('fsync(') && call.text.includes(`<${keys}>)`) && /= 0$/.test(call.text)) indexes.push(index)
  })
  return indexes
}

function indexOf(calls: readonly Call[], pattern: RegExp): number {
  return calls.findIndex((call) => pattern.test(call.text))
}

describe.skipIf(!hasStrace)('fileKeyStore makes every name it relies on durable (seen with strace)', () => {
  it('fsyncs the directory after publishing a record, after finishing one, and before returning one it did not write', { timeout: 120_000 }, async () => {
    const { keys, phases } = await traceSteps()
    expect([...phases.keys()]).toEqual(['start', 'claimed-new', 'claimed-twice', 'finished', 'claimed-existing'])

    const claimedNew = phases.get('claimed-new') ?? []
    const linked = indexOf(claimedNew, /^link(at)?\(.*\) = 0$/)
    expect(linked, 'the new record is published with link(2)').toBeGreaterThanOrEqual(0)
    expect(directoryFsyncs(claimedNew, keys).some((i) => i > linked)).toBe(true)

    // Two claims of one new operation at once: each resolves only after a directory fsync of its
    // own, the one that lost the link (EEXIST) or found the other's record as well.
    expect(directoryFsyncs(phases.get('claimed-twice') ?? [], keys).length).toBeGreaterThanOrEqual(2)

    const finished = phases.get('finished') ?? []
    const renamed = indexOf(finished, /^rename(at2?)?\(.*\) = 0$/)
    expect(renamed, 'the finished record is published with rename(2)').toBeGreaterThanOrEqual(0)
    expect(directoryFsyncs(finished, keys).some((i) => i > renamed)).toBe(true)

    const existing = phases.get('claimed-existing') ?? []
    const read = indexOf(existing, /^openat\(.*\.json", O_RDONLY.* = \d+/)
    expect(read, 'the existing record is read').toBeGreaterThanOrEqual(0)
    expect(directoryFsyncs(existing, keys).some((i) => i > read)).toBe(true)
  })
})
