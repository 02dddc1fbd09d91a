/**
 * Headers never stored: hop-by-hop ones, those the server computes for each response, cookies
 * (a replayed session cookie would outlive its session), the replay marks themselves and the key TTL.
 */
const NOT_STORED = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'date', 'content-length', 'set-cookie', 'idempotent-replayed', 'x-idempotent-replayed',
  // Advertised afresh on every answer, from the options in force then.
  'idempotency-key-ttl',
])

export type HeaderValue = string | number | readonly string[] | undefined

/** The header pairs worth replaying, names lower-cased, in the order given. */
export function storableHeaders(headers: Iterable<readonly [string, HeaderValue]>): Array<readonly [string, string]> {
  const pairs: Array<readonly [string, string]> = []
  for (const [rawName, value] of headers) {
    const name = rawName.toLowerCase()
    if (value === undefined || NOT_STORED.has(name)) continue
    if (typeof value === 'object') for (const item of value) pairs.push([name, item])
    else pairs.push([name, String(value)])
  }
  return pairs
}

/** Header pairs as one value per name (repeated names joined with `, `), for frameworks that set headers by name. */
export function headerRecord(headers: ReadonlyArray<readonly [string, string]>): Record<string, string> {
  const record: Record<string, string> = {}
  for (const [name, value] of headers) record[name] = record[name] === undefined ? value : `${record[name]}, ${value}`
  return record
}
