/**
 * The model's payment provider, in process: it dedupes on the key it is given, as a real one
 * does, and remembers which request key each charge was for, so the model can count charges per
 * (user, key) by the derived step keys it saw, never by the request key itself.
 */
export interface FakeProvider {
  /** Charges once per provider key; resolves to the charge's id. */
  charge(providerKey: string, scope: string, key: string): Promise<{ id: string }>
  /** Distinct provider keys charged for (scope, key). */
  chargedKeys(scope: string, key: string): string[]
  /** Every call, counting repeats of a provider key. */
  calls(): number
}

export function createFakeProvider(): FakeProvider {
  const charged = new Map<string, { scope: string; key: string; id: string }>()
  let calls = 0
  return {
    async charge(providerKey, scope, key) {
      calls++
      let found = charged.get(providerKey)
      if (!found) {
        found = { scope, key, id: `ch_${charged.size + 1}` }
        charged.set(providerKey, found)
      }
      return { id: found.id }
    },
    chargedKeys(scope, key) {
      return [...charged].filter(([, charge]) => charge.scope === scope && charge.key === key).map(([providerKey]) => providerKey)
    },
    calls: () => calls,
  }
}
