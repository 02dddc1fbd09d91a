/**
 * The W3C `traceparent` of the active span, when `@opentelemetry/api` (an optional peer
 * dependency) is installed and a span is active; loaded once, lazily.
 */
interface TraceApi {
  trace: { getActiveSpan(): { spanContext(): { traceId: string; spanId: string; traceFlags: number } } | undefined }
}

let api: Promise<TraceApi | undefined> | undefined

export async function activeTraceparent(): Promise<string | undefined> {
  api ??= import('@opentelemetry/api').then(
    (module) => module as unknown as TraceApi,
    () => undefined,
  )
  const span = (await api)?.trace.getActiveSpan()
  if (!span) return undefined
  const { traceId, spanId, traceFlags } = span.spanContext()
  if (/^0+$/.test(traceId)) return undefined
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, '0')}`
}
