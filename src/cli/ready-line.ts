import type { Readable } from 'node:stream'

/** How a child process ended. */
export interface ChildExit {
  code: number | null
  signal: NodeJS.Signals | null
}

/**
 * Resolves with the URL of the first `listening on http://HOST:PORT` line a child prints: the
 * readiness contract of `oncely serve` and `oncely provider`. Rejects, with `describe()` in the
 * message, when the child exits first or stays silent past `timeoutMs` (then it is SIGKILLed).
 */
export function waitForReadyLine(child: { stdout: Readable; kill(signal: NodeJS.Signals): boolean }, options: {
  output: () => string
  exited: Promise<ChildExit>
  timeoutMs: number
  describe: () => string
}): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`no ready line within ${options.timeoutMs} ms\n${options.describe()}`))
    }, options.timeoutMs)
    const onData = () => {
      const match = /listening on (http:\/\/\S+)/.exec(options.output())
      if (match?.[1]) {
        clearTimeout(timer)
        child.stdout.off('data', onData)
        resolve(match[1])
      }
    }
    child.stdout.on('data', onData)
    void options.exited.then(({ code, signal }) => {
      clearTimeout(timer)
      reject(new Error(`exited before it was ready (code ${code}, signal ${signal})\n${options.describe()}`))
    })
  })
}
