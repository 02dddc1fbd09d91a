import { isSealedBytes, isSealedText, openBytes, openJson, sealBytes, sealJson, type Keyring, type SealedPlace } from './encryption-keys.js'
import { decorateStore } from './store-decorator.js'
import type { CarriedSteps, ClaimRequest, Fence, IdempotencyStore, ReclaimInput, SeenClaim, StoreCompletion, TakeOverInput } from './store.js'
import type { ClaimAttempt, ClaimSnapshot, ClaimState, StoredResponse } from './types.js'

const stepPlace = (where: { scope: string; key: string }, step: string): SealedPlace => ({ scope: where.scope, key: where.key, field: `step:${step}` })
const responsePlace = (where: { scope: string; key: string }): SealedPlace => ({ scope: where.scope, key: where.key, field: 'response' })

/**
 * Encryption at rest (issue 23): a store decorator that seals what the engine stores (the
 * response's headers and body, every step result) and opens what it reads back. The status, the
 * fingerprint, step names and the recovery point stay in clear, so deciding a request (422,
 * 409, take-over) reads nothing sealed. The engine applies it outermost, so a Redis cache behind
 * it holds ciphertext too. A value stored before encryption was on is read as it is.
 */
export function withEncryption<Tx>(store: IdempotencyStore<Tx>, ring: Keyring): IdempotencyStore<Tx> {
  const sealSteps = (where: { scope: string; key: string }, results: Record<string, unknown>) =>
    Object.fromEntries(Object.entries(results).map(([name, result]) => [name, sealJson(ring, stepPlace(where, name), result)]))
  const sealCarried = (fence: Fence, carried: CarriedSteps | undefined) => carried && { ...carried, stepResults: sealSteps(fence, carried.stepResults) }
  const sealOutcome = (fence: Fence, completion: StoreCompletion<Tx>): StoreCompletion<Tx> => ({ ...completion, response: sealResponse(ring, fence, completion.response) })
  const openState = <S extends ClaimState | ClaimSnapshot | null>(state: S): S => (state === null ? state : openRow(ring, state))

  const encrypted: Partial<IdempotencyStore<Tx>> = {
    async claim(request: ClaimRequest): Promise<ClaimAttempt> {
      const attempt = await store.claim(request)
      return attempt.kind === 'inserted' ? { kind: 'inserted', claim: openState(attempt.claim) } : { kind: 'existing', snapshot: openState(attempt.snapshot) }
    },
    read: async (scope: string, key: string) => openState(await store.read(scope, key)),
    takeOver: async (seen: SeenClaim, take: TakeOverInput) => openState(await store.takeOver(seen, take)),
    reclaimExpired: async (seen: SeenClaim, request: ReclaimInput) => openState(await store.reclaimExpired(seen, request)),
    commitStep: (fence: Fence, step: string, result: unknown, carried?: CarriedSteps) =>
      store.commitStep(fence, step, sealJson(ring, stepPlace(fence, step), result), sealCarried(fence, carried)),
    markStepStarted: (fence: Fence, step: string, carried?: CarriedSteps) => store.markStepStarted(fence, step, sealCarried(fence, carried)),
    complete: (fence: Fence, completion: StoreCompletion<Tx>) => store.complete(fence, sealOutcome(fence, completion)),
  }
  return decorateStore(store, encrypted)
}

/**
 * The headers and the body sealed together into the body: a uint32 length of the headers' JSON,
 * that JSON, the body. The headers column keeps an empty list, so no header is left in clear.
 */
export function sealResponse(ring: Keyring, where: { scope: string; key: string }, response: StoredResponse): StoredResponse {
  const headers = Buffer.from(JSON.stringify(response.headers))
  const length = Buffer.alloc(4)
  length.writeUInt32BE(headers.length)
  return { status: response.status, headers: [], body: sealBytes(ring, responsePlace(where), Buffer.concat([length, headers, response.body])) }
}

/** The stored response as first sent; one stored in clear comes back as it is. */
export function openResponse(ring: Keyring | undefined, where: { scope: string; key: string }, response: StoredResponse): StoredResponse {
  if (!isSealedBytes(response.body)) return response
  const plain = openBytes(ring, responsePlace(where), response.body)
  const length = plain.readUInt32BE(0)
  const headers = JSON.parse(plain.subarray(4, 4 + length).toString()) as Array<[string, string]>
  return { status: response.status, headers, body: plain.subarray(4 + length) }
}

/** A row's step results opened, each in clear one as it is. */
export function openSteps(ring: Keyring | undefined, where: { scope: string; key: string }, results: Readonly<Record<string, unknown>>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(results).map(([name, result]) => [name, isSealedText(result) ? openJson(ring, stepPlace(where, name), result) : result]))
}

function openRow<S extends ClaimState | ClaimSnapshot>(ring: Keyring, row: S): S {
  const opened = { ...row, stepResults: openSteps(ring, row, row.stepResults) }
  if ('response' in row && row.response !== null) return { ...opened, response: openResponse(ring, row, row.response) }
  return opened
}
