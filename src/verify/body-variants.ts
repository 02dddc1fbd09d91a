/** The template's body changed in meaning: its first number plus one, else its first string with `-changed`. */
export function changedPayload(body: Buffer): Buffer | undefined {
  const value = parse(body)
  if (value === undefined) return undefined
  const state = { done: false }
  const changed = change(value, state)
  if (!state.done) {
    if (typeof changed !== 'object' || changed === null || Array.isArray(changed)) return undefined
    ;(changed as Record<string, unknown>).oncely_verify_changed = true
  }
  return Buffer.from(JSON.stringify(changed))
}

function change(value: unknown, state: { done: boolean }): unknown {
  if (state.done) return value
  if (typeof value === 'number') {
    state.done = true
    return value + 1
  }
  if (typeof value === 'string') {
    state.done = true
    return `${value}-changed`
  }
  if (Array.isArray(value)) return value.map((item) => change(item, state))
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([name, item]) => [name, change(item, state)]))
  return value
}

/**
 * The same JSON written differently: every object's members in reverse order, indented. A
 * server that fingerprints the meaning (RFC 8785) replays; one that hashes the bytes does not.
 */
export function reorderedJson(body: Buffer): Buffer | undefined {
  const value = parse(body)
  if (typeof value !== 'object' || value === null) return undefined
  return Buffer.from(`\n${JSON.stringify(reverse(value), null, 2)}\n`)
}

function reverse(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reverse)
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).reverse().map(([name, item]) => [name, reverse(item)]))
  return value
}

function parse(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8')) as unknown
  } catch {
    return undefined
  }
}
