/** How a wait bounded by the call's deadline and abort signal ended. */
export type BoundedResult<T> = { readonly kind: 'done'; readonly value: T } | { readonly kind: 'deadline' } | { readonly kind: 'aborted' }

/**
 * Waits for `work` no longer than `remainingMs` and no longer than `signal` stays unaborted. A
 * rejection of `work` rejects; a hung `work` is left behind (a key store that never answers must
 * not keep the call pending past its deadline or its abort).
 */
export async function boundedWait<T>(work: Promise<T>, remainingMs: number, signal: AbortSignal | undefined): Promise<BoundedResult<T>> {
  // Work left behind may still reject; that must not surface as an unhandled rejection.
  work.catch(() => undefined)
  if (signal?.aborted) return { kind: 'aborted' }
  if (remainingMs <= 0) return { kind: 'deadline' }
  let timer: NodeJS.Timeout | undefined
  let onAbort: (() => void) | undefined
  const stops = new Promise<BoundedResult<T>>((resolve) => {
    if (Number.isFinite(remainingMs)) timer = setTimeout(() => resolve({ kind: 'deadline' }), Math.ceil(remainingMs))
    onAbort = () => resolve({ kind: 'aborted' })
    signal?.addEventListener('abort', onAbort, { once: true })
  })
  try {
    return await Promise.race([work.then((value): BoundedResult<T> => ({ kind: 'done', value })), stops])
  } finally {
    clearTimeout(timer)
    if (onAbort) signal?.removeEventListener('abort', onAbort)
  }
}
