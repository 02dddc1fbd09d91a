import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url))

export interface CliResult {
  code: number
  stdout: string
  stderr: string
}

/** Runs `oncely …` from the current source as a real process. */
export function runCli(args: string[], env: Record<string, string | undefined> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', main, ...args],
      { env: { ...process.env, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error && typeof error.code === 'number' ? error.code : error ? 1 : 0
        resolve({ code, stdout, stderr })
      },
    )
  })
}
