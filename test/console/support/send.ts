import { request } from 'node:http'

export interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
}

/** One HTTP request with exactly these headers (`Host` included, which fetch would not let a test choose). */
export function send(url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  const target = new URL(url)
  return new Promise<Answer>((resolve, reject) => {
    const outgoing = request(
      { host: target.hostname.replace(/^\[|\]$/g, ''), port: target.port, method: options.method ?? 'GET', path: `${target.pathname}${target.search}`, headers: { connection: 'close', ...options.headers } },
      (answer) => {
        let text = ''
        answer.setEncoding('utf8').on('data', (chunk: string) => (text += chunk))
        answer.on('end', () => resolve({ status: answer.statusCode ?? 0, headers: answer.headers, text }))
      },
    )
    outgoing.on('error', reject)
    outgoing.end(options.body)
  })
}
