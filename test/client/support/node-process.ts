import { spawn, type ChildProcess } from 'node:child_process'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
/** tsx's loader by absolute URL, so that a child started in another folder still finds it. */
export const TSX = pathToFileURL(createRequire(path.join(REPO_ROOT, 'package.json')).resolve('tsx')).href

export interface Finished {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

export interface RunningNode {
  readonly child: ChildProcess
  /** Everything written to stdout so far. */
  stdout(): string
  /** Everything written to stderr so far. */
  stderr(): string
  readonly finished: Promise<Finished>
}

/**
 * Starts `node --import tsx <script> …args` (TypeScript, no build); `script` is relative to the
 * repository root, and the child runs there unless `cwd` says otherwise.
 */
export function startNode(script: string, args: readonly string[], env: Record<string, string> = {}, cwd: string = REPO_ROOT): RunningNode {
  const child = spawn(process.execPath, ['--import', TSX, path.join(REPO_ROOT, script), ...args], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const untrack = trackOpenHandle(`child process ${script} ${args.join(' ')}`)
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const finished = new Promise<Finished>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code, signal) => {
      untrack()
      resolve({ code, signal, stdout, stderr })
    })
  })
  return { child, stdout: () => stdout, stderr: () => stderr, finished }
}

/** Runs `oncely request …` to the end, in `cwd` (the repository root by default). */
export function runRequestCommand(args: readonly string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<Finished> {
  const running = startNode('src/cli/main.ts', ['request', ...args], options.env, options.cwd)
  running.child.stdin?.end()
  return running.finished
}
