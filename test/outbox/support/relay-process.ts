import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { REPO_ROOT } from '../../helpers/processes.js'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/** `oncely relay` as a child process, started and ready. */
export interface RelayProcess {
  readonly child: ChildProcess
  stderr(): string
  readonly exited: Promise<void>
  kill(signal: NodeJS.Signals): Promise<void>
}

export async function startRelayProcess(args: readonly string[], env: Record<string, string>): Promise<RelayProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'src/cli/main.ts'), 'relay', ...args], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const untrack = trackOpenHandle(`oncely relay ${args.join(' ')}`)
  let stdout = ''
  let stderr = ''
  const exited = new Promise<void>((resolve) => child.once('close', () => (untrack(), resolve())))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  await new Promise<void>((resolve, reject) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk
      if (stdout.includes('oncely relay: publishing')) resolve()
    })
    void exited.then(() => reject(new Error(`oncely relay exited before it was ready:\n${stderr}`)))
  })
  return {
    child,
    stderr: () => stderr,
    exited,
    async kill(signal) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      await exited
    },
  }
}
