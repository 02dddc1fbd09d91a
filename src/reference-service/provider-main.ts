// Entry of the fake provider as the service's child process (see provider-process.ts).
import { providerSettings, runProvider } from './provider-run.js'

const TEN_MINUTES = 600_000

runProvider(providerSettings(process.env), { orphanIdleExitMs: TEN_MINUTES }).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`oncely fake provider: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exit(1)
  },
)
