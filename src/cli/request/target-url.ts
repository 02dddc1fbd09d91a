import { redactUrl } from '../../client/index.js'
import { UsageError } from '../command.js'

/**
 * The URL given to `oncely request`, checked so that a mistake gets a clear usage message that
 * never repeats a credential or a query value.
 */
export function parseTargetUrl(target: string): URL {
  const url = tryParse(target)
  // `localhost:3000/v1` parses as the scheme `localhost:`: a host and port without a scheme.
  const schemeless = url === undefined || /^[a-z0-9.-]+:\d+(\/|$)/i.test(target)
  if (schemeless) {
    const guess = tryParse(`http://${target}`)
    const hint = guess ? `; did you mean '${redactUrl(guess)}'?` : ''
    throw new UsageError(`'${withoutQuery(target)}' is not an http(s) URL: it needs a scheme and a host, as in http://127.0.0.1:3000/v1/charges${hint}`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`'${url.protocol}' URLs are not sent: only http and https`)
  if (url.username || url.password) {
    throw new UsageError("the URL holds credentials (user:password@), which are not sent; pass them as --header 'authorization: Basic …' (not shown: they may be secret)")
  }
  return url
}

function tryParse(text: string): URL | undefined {
  try {
    return new URL(text)
  } catch {
    return undefined
  }
}

function withoutQuery(text: string): string {
  const question = text.indexOf('?')
  return question < 0 ? text : `${text.slice(0, question)}?…`
}
