/**
 * A URL fit for a log line or an error message: credentials (`user:password@`) removed and every
 * query value replaced by `***`, since API keys and signed-URL signatures travel there. Query
 * names, the path and the origin are kept.
 *
 * @example
 * ```ts
 * import { redactUrl } from 'oncely/client'
 * redactUrl('https://me:pw@api.example.com/v1/charges?api_key=sk_live_1&limit=5')
 * // 'https://api.example.com/v1/charges?api_key=***&limit=***'
 * ```
 */
export function redactUrl(url: string | URL): string {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return '(a URL that cannot be parsed; not shown)'
  }
  parsed.username = ''
  parsed.password = ''
  const names = [...parsed.searchParams.keys()]
  const query = names.length > 0 ? `?${names.map((name) => `${encodeURIComponent(name)}=***`).join('&')}` : ''
  return `${parsed.origin}${parsed.pathname}${query}`
}
