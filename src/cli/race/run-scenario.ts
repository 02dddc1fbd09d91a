import { setTimeout as sleep } from 'node:timers/promises'
import { startOncely, type OncelyChild } from './child-process.js'
import { countCharges, postCharge } from './requests.js'
import type { Expected, Scenario, ScenarioKind } from './scenarios.js'
import type { StrategyName } from '../../reference-service/config.js'

/** The article's provider call: half a second. */
export const PROVIDER_LATENCY_MS = 500
/** Short, so a crashed claim becomes stale within the run; well above the provider call. */
export const STALE_AFTER_MS = 1500
/** How often a retry after a crash is sent while the answer is 409. */
const RETRY_EVERY_MS = 200
/** Retries stop after this long without a final answer; the row then fails. */
const RETRY_FOR_MS = 20_000

/** One measured row. */
export interface RaceRow {
  strategy: StrategyName
  scenario: ScenarioKind
  description: string
  /**
   * `concurrent`: the two statuses, ascending. `crash`: the crashed request's (`null`: no
   * response, the process died), then each retry's, in order.
   */
  statuses: Array<number | null>
  /** Charges the provider made, or `null` if the scenario could not count them. */
  charges: number | null
  expected: Expected
  matches: boolean
  durationMs: number
  /** Why the scenario could not run to the end. */
  error?: string
}

/** Runs one scenario on an empty database at `databaseUrl`, with its own provider and API processes. */
export async function runScenario(scenario: Scenario, databaseUrl: string, key: string): Promise<RaceRow> {
  const startedAt = performance.now()
  const statuses: Array<number | null> = []
  let charges: number | null = null
  let error: string | undefined
  const children: OncelyChild[] = []
  try {
    const provider = await startOncely(['provider', '--host', '127.0.0.1', '--port', '0', '--latency-ms', String(PROVIDER_LATENCY_MS)])
    children.push(provider)
    const startApi = async () => {
      const api = await startOncely(serveArgs(scenario, databaseUrl, provider.url))
      children.push(api)
      return api
    }
    const api = await startApi()
    if (scenario.kind === 'concurrent') {
      const both = await Promise.all([postCharge(api.url, key), postCharge(api.url, key)])
      statuses.push(...both.sort(byStatus))
    } else {
      statuses.push(await postCharge(api.url, key, { crash: true }))
      if (statuses[0] === null) {
        const { signal } = await api.exited
        if (signal !== 'SIGKILL') throw new Error(`the API was expected to SIGKILL itself; it exited with ${signal ?? 'a code'}`)
        const restarted = await startApi()
        statuses.push(...(await retryUntilFinal(restarted.url, key)))
      }
    }
    charges = await countCharges(provider.url)
  } catch (caught) {
    error = caught instanceof Error ? caught.message : String(caught)
  } finally {
    await Promise.all(children.map((child) => child.stop()))
  }
  const row: RaceRow = {
    strategy: scenario.strategy,
    scenario: scenario.kind,
    description: scenario.description,
    statuses,
    charges,
    expected: scenario.expected,
    matches: false,
    durationMs: Math.round(performance.now() - startedAt),
  }
  if (error !== undefined) row.error = error
  else row.matches = matchesExpected(scenario, statuses, charges)
  return row
}

function serveArgs(scenario: Scenario, databaseUrl: string, providerUrl: string): string[] {
  const args = ['serve', '--host', '127.0.0.1', '--port', '0', '--database-url', databaseUrl, '--provider-url', providerUrl]
  args.push('--strategy', scenario.strategy, '--stale-after-ms', String(STALE_AFTER_MS))
  if (scenario.kind === 'crash') args.push('--chaos')
  return args
}

/** Sends the same request until the answer is not 409; returns every status it got. */
async function retryUntilFinal(apiUrl: string, key: string): Promise<number[]> {
  const statuses: number[] = []
  const deadline = performance.now() + RETRY_FOR_MS
  for (;;) {
    const status = await postCharge(apiUrl, key)
    if (status === null) throw new Error('a retry got no response')
    statuses.push(status)
    if (status !== 409) return statuses
    if (performance.now() > deadline) throw new Error(`still 409 after ${RETRY_FOR_MS} ms of retries`)
    await sleep(RETRY_EVERY_MS)
  }
}

/** Whether the measured statuses and charges are the article's. */
export function matchesExpected(scenario: Scenario, statuses: ReadonlyArray<number | null>, charges: number | null): boolean {
  const { expected } = scenario
  if (charges !== expected.charges) return false
  if (scenario.kind === 'concurrent') {
    const want = expected.statuses ?? []
    return statuses.length === want.length && statuses.every((status, i) => status === want[i])
  }
  // The crashed request got no answer; every retry but the last was 409; the last is final.
  const [crashed, ...retries] = statuses
  const final = retries.at(-1)
  return crashed === null && final === expected.finalStatus && retries.slice(0, -1).every((status) => status === 409)
}

function byStatus(a: number | null, b: number | null): number {
  return (a ?? 0) - (b ?? 0)
}
