import { integer } from './config.js'
import { startProvider, type RunningProvider } from './provider.js'

export interface ProviderSettings {
  host: string
  port: number
  latencyMs: number
  flakyN: number
}

/** The provider's settings from its environment (`PROVIDER_HOST`, `PROVIDER_PORT`, `PROVIDER_LATENCY_MS`, `PROVIDER_FLAKY_N`). */
export function providerSettings(env: Readonly<Record<string, string | undefined>>, overrides: Partial<ProviderSettings> = {}): ProviderSettings {
  const read = (name: string) => (env[name]?.trim() ? env[name]?.trim() : undefined)
  return {
    host: read('PROVIDER_HOST') ?? '127.0.0.1',
    port: integer('PROVIDER_PORT', read('PROVIDER_PORT'), 3001, { min: 0, max: 65535 }),
    latencyMs: integer('PROVIDER_LATENCY_MS', read('PROVIDER_LATENCY_MS'), 0, { min: 0 }),
    flakyN: integer('PROVIDER_FLAKY_N', read('PROVIDER_FLAKY_N'), 1, { min: 0 }),
    ...Object.fromEntries(Object.entries(overrides).filter(([, value]) => value !== undefined)),
  }
}

/**
 * Runs the fake provider until SIGINT or SIGTERM, printing `listening on http://HOST:PORT` when
 * it accepts requests. Resolves when it has stopped.
 */
export async function runProvider(settings: ProviderSettings, options: { orphanIdleExitMs?: number } = {}): Promise<void> {
  const provider = await startProvider(settings)
  // A parent that dies leaves this pipe broken; the provider must live on regardless.
  process.stdout.on('error', () => {})
  process.stdout.write(`oncely fake provider listening on ${provider.url} (latency ${settings.latencyMs} ms)\n`)
  await new Promise<void>((resolve) => {
    const stop = () => {
      clearInterval(watchdog)
      void provider.close().then(resolve)
    }
    process.once('SIGINT', stop)
    process.once('SIGTERM', stop)
    const watchdog = watchOrphan(provider, options.orphanIdleExitMs, stop)
  })
}

/**
 * Started as the service's child, the provider outlives an API crash on purpose (it holds the
 * charges). Left orphaned and unused, it stops by itself after `idleMs`, so a crashed demo does
 * not keep a port forever; a restarted service adopts it before that.
 */
function watchOrphan(provider: RunningProvider, idleMs: number | undefined, stop: () => void): NodeJS.Timeout | undefined {
  if (idleMs === undefined) return undefined
  const parent = process.ppid
  let lastRequest = Date.now()
  provider.server.on('request', () => (lastRequest = Date.now()))
  const timer = setInterval(() => {
    if (process.ppid !== parent && Date.now() - lastRequest > idleMs) stop()
  }, Math.min(idleMs, 5000))
  timer.unref()
  return timer
}
