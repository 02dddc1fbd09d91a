/** Bodies up to this size are handed to fetch whole; fetch copies them, which is cheap here. */
const STREAM_ABOVE_BYTES = 1024 * 1024
const CHUNK_BYTES = 64 * 1024

/** What one attempt passes to fetch for `bytes`. */
export interface AttemptBody {
  readonly body: Uint8Array | ReadableStream<Uint8Array> | null
  /** `'half'` for a stream, as fetch requires. */
  readonly duplex?: 'half'
  /** Set for a stream, so that it is sent with a length rather than chunked. */
  readonly contentLength?: string
}

/**
 * A large body is streamed from the one copy the call holds, in views of it: fetch copies a
 * `Uint8Array` (or a `Blob`) whole on every attempt, which made a 128 MiB body cost several
 * times its size.
 */
export function attemptBody(bytes: Uint8Array | undefined): AttemptBody {
  if (bytes === undefined) return { body: null }
  if (bytes.byteLength <= STREAM_ABOVE_BYTES) return { body: bytes }
  let offset = 0
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (offset >= bytes.byteLength) {
        controller.close()
        return
      }
      controller.enqueue(bytes.subarray(offset, offset + CHUNK_BYTES))
      offset += CHUNK_BYTES
    },
  })
  return { body: stream, duplex: 'half', contentLength: String(bytes.byteLength) }
}
