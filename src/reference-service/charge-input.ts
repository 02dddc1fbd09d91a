/** A validated `POST /v1/charges` body. */
export interface ChargeInput {
  amount: number
  currency: string
  customer: string
}

export type ChargeInputResult = { ok: true; input: ChargeInput; body: unknown } | { ok: false; detail: string }

const FIELDS = new Set(['amount', 'currency', 'customer'])
const MAX_AMOUNT = 99_999_999_999

/**
 * Parses and validates the body text. Any failure is a 400 with nothing stored, so the same key
 * with a corrected body succeeds afterwards. Unknown fields are refused, as Stripe does.
 */
export function parseChargeInput(text: string): ChargeInputResult {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return { ok: false, detail: 'the body is not valid JSON' }
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { ok: false, detail: 'the body must be a JSON object' }
  const record = body as Record<string, unknown>
  const unknown = Object.keys(record).filter((name) => !FIELDS.has(name))
  if (unknown.length > 0) return { ok: false, detail: `unknown field ${JSON.stringify(unknown[0])}; expected amount, currency and customer` }
  const { amount, currency, customer } = record
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0 || amount > MAX_AMOUNT) {
    return { ok: false, detail: `amount must be a positive integer (smallest currency unit) up to ${MAX_AMOUNT}` }
  }
  if (typeof currency !== 'string' || !/^[a-z]{3}$/.test(currency)) return { ok: false, detail: 'currency must be 3 lowercase letters, e.g. "usd"' }
  if (typeof customer !== 'string' || customer.length === 0 || customer.length > 255 || !isPrintable(customer)) {
    return { ok: false, detail: 'customer must be a non-empty string of at most 255 printable characters' }
  }
  return { ok: true, input: { amount, currency, customer }, body }
}

/** No control characters (PostgreSQL text cannot hold NUL) and no lone UTF-16 surrogates. */
function isPrintable(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i)
    if (code < 0x20 || code === 0x7f) return false
    if (code >= 0xd800 && code <= 0xdbff) {
      const next = value.charCodeAt(i + 1)
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false
      i++
    } else if (code >= 0xdc00 && code <= 0xdfff) {
      return false
    }
  }
  return true
}
