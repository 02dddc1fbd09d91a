/** The one charge every request of a scenario sends: same user, same key, same payload. */
const PAYLOAD = JSON.stringify({ amount: 1000, currency: 'usd', customer: 'cus_race' })

/**
 * POSTs the charge to the API and resolves to its status, or to `null` when no response came
 * back (the process died under it). `crash` asks a `CHAOS=1` API to kill itself after the
 * provider call.
 */
export async function postCharge(apiUrl: string, key: string, options: { crash?: boolean; timeoutMs?: number } = {}): Promise<number | null> {
  const headers: Record<string, string> = {
    authorization: 'Bearer demo_1',
    'content-type': 'application/json',
    'idempotency-key': key,
  }
  if (options.crash === true) headers['x-chaos-crash'] = 'after-provider'
  let response: Response
  try {
    response = await fetch(`${apiUrl}/v1/charges`, { method: 'POST', headers, body: PAYLOAD, signal: AbortSignal.timeout(options.timeoutMs ?? 15_000) })
  } catch (error) {
    if (options.crash === true) return null
    throw new Error(`POST ${apiUrl}/v1/charges failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error })
  }
  // Drain the body so the connection is released.
  await response.arrayBuffer()
  return response.status
}

/** The number of charges the fake provider has made (`GET /v1/charges` → `{ data: [...] }`). */
export async function countCharges(providerUrl: string): Promise<number> {
  const response = await fetch(`${providerUrl}/v1/charges`, { signal: AbortSignal.timeout(10_000) })
  if (!response.ok) throw new Error(`GET ${providerUrl}/v1/charges answered ${response.status}`)
  const body = (await response.json()) as { data?: unknown }
  if (!Array.isArray(body.data)) throw new Error(`GET ${providerUrl}/v1/charges did not answer { data: [...] }`)
  return body.data.length
}
