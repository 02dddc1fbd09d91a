// What the framework examples share: a stand-in payment provider and the requests a client sends.

/** A payment provider that dedupes on its own Idempotency-Key, as real ones do. */
export function fakeProvider() {
  const charges = new Map<string, { id: string; amount: number }>()
  return {
    async charge(amount: number, idempotencyKey: string) {
      const existing = charges.get(idempotencyKey)
      if (existing) return existing
      const charge = { id: `ch_${charges.size + 1}`, amount }
      charges.set(idempotencyKey, charge)
      return charge
    },
    get count() {
      return charges.size
    },
  }
}

/** Sends a charge, its retry, and the same key with another amount; prints what each got. */
export async function chargeTwiceThenChangeTheAmount(baseUrl: string): Promise<void> {
  const key = `order-${Date.now()}`
  for (const amount of [1000, 1000, 9999]) {
    const response = await fetch(`${baseUrl}/v1/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-user-id': '42' },
      body: JSON.stringify({ amount }),
    })
    const body = await response.text()
    const replayed = response.headers.get('idempotent-replayed') === 'true' ? ' (replayed)' : ''
    console.log(`${response.status}${replayed} ${response.ok ? body : (JSON.parse(body) as { type: string }).type}`)
  }
}
