/** Small HTTP helpers for driving the service as a black box. */
export interface Answer {
  status: number
  headers: Headers
  text: string
  json: unknown
}

let nextUser = 1000 + Math.floor(Math.random() * 1_000_000)

/** A user id no other test of the file uses, so provider charges can be counted per test. */
export function newUser(): string {
  return String(nextUser++)
}

export function charge(customer = 'cus_ok', amount = 1000): string {
  return JSON.stringify({ amount, currency: 'usd', customer })
}

export async function post(url: string, options: { user?: string; key?: string; body?: string; headers?: Record<string, string> }): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...options.headers }
  if (options.user !== undefined) headers.authorization = `Bearer demo_${options.user}`
  if (options.key !== undefined) headers['idempotency-key'] = options.key
  const response = await fetch(`${url}/v1/charges`, { method: 'POST', headers, body: options.body ?? charge() })
  return read(response)
}

export async function get(url: string, path: string, user?: string): Promise<Answer> {
  const response = await fetch(`${url}${path}`, { headers: user === undefined ? {} : { authorization: `Bearer demo_${user}` } })
  return read(response)
}

async function read(response: Response): Promise<Answer> {
  const text = await response.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: response.status, headers: response.headers, text, json }
}

export function isProblem(answer: Answer, status: number): boolean {
  const body = answer.json as { type?: unknown; title?: unknown; status?: unknown; detail?: unknown } | undefined
  return (
    answer.status === status &&
    answer.headers.get('content-type')?.startsWith('application/problem+json') === true &&
    typeof body?.type === 'string' &&
    typeof body.title === 'string' &&
    body.status === status &&
    typeof body.detail === 'string'
  )
}
