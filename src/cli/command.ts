/**
 * One CLI command. Commands live in `commands/<name>.ts` and export `command`; `main.ts` loads
 * only the one asked for, so `oncely request` never loads the server and the reverse.
 */
export interface Command {
  readonly name: string
  /** One line for `oncely help`. */
  readonly summary: string
  /** The full `--help` text: usage, flags, environment, exit codes. */
  readonly help: string
  /** Runs the command and resolves to the process exit code. */
  run(argv: string[]): Promise<number>
}

/** Exit codes shared by every command (docs/cli.md, "Exit codes"). */
export const EXIT = {
  ok: 0,
  /** The command ran and its outcome was a failure (a check failed, a request got a 4xx…). */
  failure: 1,
  /** Bad usage: unknown flag, missing argument, bad value. */
  usage: 2,
  /** The database could not be reached: refused, unknown host, no such database, authentication. */
  unreachable: 3,
} as const

/** Thrown by a command for bad usage; `main.ts` prints it with the command's help hint. */
export class UsageError extends Error {
  override name = 'UsageError'
}
