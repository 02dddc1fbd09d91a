import { randomUUID } from 'node:crypto'
import { headerOf, openRequest, sendRequest, type OutgoingRequest, type Received } from './http.js'
import type { CheckId } from './check-result.js'
import type { ResolvedVerifyOptions } from './options.js'
import { countsPerKey, readExecutions } from './probe.js'

/** What the checks of one run share: every 409 seen, for the Retry-After check. */
export interface RunState {
  readonly conflicts: Array<{ check: CheckId; retryAfter: string | undefined }>
}

/** One request of a check, as a change to the template. */
export interface RequestSpec {
  /** For the report: what this request is (`the template`, `the changed payload`). */
  readonly label: string
  /** The Idempotency-Key: one value, several header lines, or none. */
  readonly key: string | readonly string[] | null
  /** (Default: the template's body) */
  readonly body?: Buffer | undefined
  /** (Default: the template's headers) */
  readonly headers?: ReadonlyArray<readonly [string, string]>
  /** A tag for the Oncely-Verify header, after the check id (`width=50`). */
  readonly tag?: string
}

/** The kit's tools for one check: requests that record what was sent, probe counts, fresh keys. */
export class CheckContext {
  readonly sent: string[] = []

  constructor(
    readonly options: ResolvedVerifyOptions,
    readonly check: CheckId,
    readonly state: RunState,
  ) {}

  /** A key no earlier run used. */
  newKey(): string {
    return `oncely-verify-${randomUUID()}`
  }

  request(spec: RequestSpec): OutgoingRequest {
    const keys = spec.key === null ? [] : typeof spec.key === 'string' ? [spec.key] : spec.key
    const headers: Array<readonly [string, string]> = [
      ...(spec.headers ?? this.options.headers),
      ['oncely-verify', spec.tag === undefined ? this.check : `${this.check}; ${spec.tag}`],
      ...keys.map((key) => ['idempotency-key', key] as const),
    ]
    const body = 'body' in spec ? spec.body : this.options.body
    const keyText = keys.length === 0 ? 'no Idempotency-Key' : keys.map((key) => `Idempotency-Key: ${JSON.stringify(key)}`).join(' and ')
    this.sent.push(`${this.options.method} ${this.options.url.pathname}${this.options.url.search}: ${spec.label}, ${keyText}`)
    return { method: this.options.method, url: this.options.url, headers, body }
  }

  /** Sends one request; a 409 is remembered for the Retry-After check. */
  async send(spec: RequestSpec): Promise<Received> {
    return this.#noted(await sendRequest(this.request(spec), this.options.timeoutMs))
  }

  /**
   * Sends `width` copies of one request at once, each on its own connection: every request is
   * written but its last byte, then all the last bytes are released together.
   */
  async burst(spec: RequestSpec, width: number): Promise<Array<Received | Error>> {
    const request = this.request({ ...spec, label: `${spec.label} ×${width} at once, one connection each`, tag: `width=${width}` })
    const held = Array.from({ length: width }, () => openRequest(request, { timeoutMs: this.options.timeoutMs, hold: true }))
    await Promise.all(held.map((one) => one.written))
    for (const one of held) one.release()
    return Promise.all(held.map((one) => one.response.then((answer) => this.#noted(answer), (error: unknown) => (error instanceof Error ? error : new Error(String(error))))))
  }

  /**
   * Sends until the answer is not a 409, waiting each 409's Retry-After (at most 5 s, 1 s when
   * absent), until `retryDeadlineMs`.
   */
  async sendUntilSettled(spec: RequestSpec): Promise<{ answer: Received; conflicts: number }> {
    const deadline = Date.now() + this.options.retryDeadlineMs
    for (let conflicts = 0; ; conflicts++) {
      const answer = await this.send({ ...spec, label: conflicts === 0 ? spec.label : `${spec.label} again after a 409` })
      if (answer.status !== 409 || Date.now() >= deadline) return { answer, conflicts }
      const seconds = Number(headerOf(answer, 'retry-after'))
      const waitMs = Number.isFinite(seconds) && seconds >= 0 ? Math.min(seconds * 1000, 5000) : 1000
      await new Promise((resolve) => setTimeout(resolve, Math.min(waitMs, Math.max(0, deadline - Date.now()))))
    }
  }

  /**
   * Runs `action` and says how many executions the probe counted meanwhile (for `key` when the
   * probe counts per key); `undefined` without a probe, or for a request without a key when it counts per key.
   */
  async counted<T>(key: string | undefined, action: () => Promise<T>): Promise<{ value: T; executions: number | undefined }> {
    const probe = this.options.probe
    if (probe === undefined || (key === undefined && countsPerKey(probe))) return { value: await action(), executions: undefined }
    const before = await readExecutions(probe, key, this.options.timeoutMs)
    const value = await action()
    return { value, executions: (await readExecutions(probe, key, this.options.timeoutMs)) - before }
  }

  #noted(answer: Received): Received {
    if (answer.status === 409) this.state.conflicts.push({ check: this.check, retryAfter: headerOf(answer, 'retry-after') })
    return answer
  }
}

/** `N executions` for the report, or that nothing counted them. */
export function executionsText(executions: number | undefined): string {
  return executions === undefined ? 'executions not counted (no probe)' : `${executions} execution${executions === 1 ? '' : 's'} counted by the probe`
}

/** A problem when the probe counted other than `want`; none without a probe. */
export function executionProblems(executions: number | undefined, want: number): string[] {
  return executions === undefined || executions === want ? [] : [`the probe counted ${executions} executions, not ${want}`]
}
