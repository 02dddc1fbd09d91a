// The part of autocannon 8's programmatic API the benchmark uses (it ships no types).
declare module 'autocannon' {
  interface Histogram {
    average: number
    total: number
    p50: number
    p90: number
    p99: number
    max: number
  }
  interface RawRequest {
    method?: string
    path?: string
    headers?: Record<string, string>
    body?: string
  }
  interface Options {
    url: string
    connections?: number
    duration?: number
    overallRate?: number
    method?: string
    headers?: Record<string, string>
    body?: string
    requests?: Array<RawRequest & { setupRequest?: (request: RawRequest, context: Record<string, unknown>) => RawRequest }>
  }
  interface Result {
    requests: Histogram
    latency: Histogram
    duration: number
    errors: number
    timeouts: number
    non2xx: number
    statusCodeStats: Record<string, { count: number }>
  }
  function autocannon(options: Options): Promise<Result>
  export default autocannon
}
