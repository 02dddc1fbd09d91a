import { readFile } from 'node:fs/promises'
import { UsageError } from '../command.js'

/** What a `--template FILE` may hold; flags given on the command line win over it. */
export interface VerifyTemplate {
  url?: string
  method?: string
  /** A string is sent as is; anything else as its JSON. */
  body?: unknown
  headers?: Record<string, string>
  otherHeaders?: Record<string, string>
  probe?: string
  failBody?: unknown
  changedBody?: unknown
  ttlMs?: number
  width?: number
}

const FIELDS = new Set(['url', 'method', 'body', 'headers', 'otherHeaders', 'probe', 'failBody', 'changedBody', 'ttlMs', 'width'])

export async function readTemplate(file: string): Promise<VerifyTemplate> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (error) {
    throw new UsageError(`--template ${file} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`)
  }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    throw new UsageError(`--template ${file} is not JSON`)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UsageError(`--template ${file} must hold a JSON object`)
  const unknown = Object.keys(value).find((name) => !FIELDS.has(name))
  if (unknown !== undefined) throw new UsageError(`--template ${file} has an unknown field ${JSON.stringify(unknown)} (known: ${[...FIELDS].join(', ')})`)
  const template = value as VerifyTemplate
  for (const name of ['headers', 'otherHeaders'] as const) {
    const headers = template[name]
    if (headers !== undefined && (typeof headers !== 'object' || headers === null || Object.values(headers).some((item) => typeof item !== 'string'))) {
      throw new UsageError(`--template ${file}: ${name} must be an object of header names to string values`)
    }
  }
  for (const name of ['ttlMs', 'width'] as const) {
    if (template[name] !== undefined && typeof template[name] !== 'number') throw new UsageError(`--template ${file}: ${name} must be a number`)
  }
  for (const name of ['url', 'method', 'probe'] as const) {
    if (template[name] !== undefined && typeof template[name] !== 'string') throw new UsageError(`--template ${file}: ${name} must be a string`)
  }
  return template
}

/** A body from the template: a string as is, anything else as JSON. */
export const bodyText = (body: unknown): string | undefined => (body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body))
