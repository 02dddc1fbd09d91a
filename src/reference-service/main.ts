// `npm start`: the reference service, configured by environment variables only.
import { ConfigError, resolveServiceConfig } from './config.js'
import { runUntilSignal } from './service.js'

async function main(): Promise<number> {
  let config
  try {
    config = resolveServiceConfig(process.env)
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`oncely: ${error.message}\n`)
      return 2
    }
    throw error
  }
  return runUntilSignal(config)
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    process.stderr.write(`oncely: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
    process.exitCode = 1
  },
)
