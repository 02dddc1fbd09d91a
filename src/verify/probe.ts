import { sendRequest } from './http.js'

/**
 * Reads the side-effect probe: how many times the endpoint has executed (for one key, when the
 * probe URL holds `{key}`). Accepts a JSON number, `{ "count": N }`, an array or `{ "data": [...] }`.
 */
export async function readExecutions(probe: string, key: string | undefined, timeoutMs: number): Promise<number> {
  const url = new URL(probe.replaceAll('{key}', encodeURIComponent(key ?? '')))
  const answer = await sendRequest({ method: 'GET', url, headers: [['accept', 'application/json']], body: undefined }, timeoutMs)
  if (answer.status !== 200) throw new Error(`the probe answered ${answer.status}, not 200`)
  let value: unknown
  try {
    value = JSON.parse(answer.body.toString('utf8'))
  } catch {
    throw new Error('the probe did not answer JSON')
  }
  const count = countOf(value)
  if (count === undefined) throw new Error('the probe answered neither a number, {"count": N}, an array nor {"data": [...]}')
  return count
}

function countOf(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value
  if (Array.isArray(value)) return value.length
  if (typeof value === 'object' && value !== null) {
    const { count, data } = value as { count?: unknown; data?: unknown }
    if (count !== undefined) return countOf(count)
    if (Array.isArray(data)) return data.length
  }
  return undefined
}

/** Whether the probe counts per key (its URL holds `{key}`): a request without a key cannot be counted then. */
export const countsPerKey = (probe: string): boolean => probe.includes('{key}')
