/**
 * What the server says a client may do next with its key, read from the members oncely puts in
 * every problem it answers (docs/adapters.md, Answers) and the `Idempotency-Key-TTL`
 * header. A member the server did not send is `undefined`: other servers send none of them.
 */
export interface KeyAdvice {
  /** `retry_same_key`: `false` means the same request with the same key gets the same answer; the client stops retrying. */
  readonly retrySameKey: boolean | undefined
  /**
   * `new_key_safe`: `true` when the server knows nothing ran for this request, so sending it
   * again under a new key (a new `operationId`) cannot run it twice. Never assume it otherwise.
   */
  readonly newKeySafe: boolean | undefined
  /** `operation_state`: `none`, `running`, `suspended`, `completed`, `failed` or `unknown`. */
  readonly operationState: string | undefined
  /** How long the server remembers a key, in seconds: the `Idempotency-Key-TTL` header, else `key_ttl_seconds`. */
  readonly keyTtlSeconds: number | undefined
}

const NONE: KeyAdvice = Object.freeze({ retrySameKey: undefined, newKeySafe: undefined, operationState: undefined, keyTtlSeconds: undefined })

/** The advice in a response: its problem body's members (when it is `application/problem+json`) and its TTL header. */
export function keyAdviceOf(headers: Headers, body: Buffer): KeyAdvice {
  const members = problemMembers(headers, body)
  const headerTtl = seconds(headers.get('idempotency-key-ttl'))
  const advice: KeyAdvice = {
    retrySameKey: typeof members.retry_same_key === 'boolean' ? members.retry_same_key : undefined,
    newKeySafe: typeof members.new_key_safe === 'boolean' ? members.new_key_safe : undefined,
    operationState: typeof members.operation_state === 'string' ? members.operation_state : undefined,
    keyTtlSeconds: headerTtl ?? (typeof members.key_ttl_seconds === 'number' ? seconds(String(members.key_ttl_seconds)) : undefined),
  }
  return Object.values(advice).every((value) => value === undefined) ? NONE : Object.freeze(advice)
}

function problemMembers(headers: Headers, body: Buffer): Record<string, unknown> {
  if (!/^application\/problem\+json\b/i.test(headers.get('content-type') ?? '')) return {}
  try {
    const parsed: unknown = JSON.parse(body.toString('utf8'))
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

/** A delta-seconds value (RFC 9110 §1.2.1 style: digits only), else `undefined`. */
function seconds(value: string | null): number | undefined {
  if (value === null || !/^\d{1,10}$/.test(value.trim())) return undefined
  return Number(value.trim())
}
