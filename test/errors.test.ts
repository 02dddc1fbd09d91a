import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { ERROR_CODES } from '../src/errors.js'

describe('error codes', () => {
  it('every code has a section in docs/errors.md, and every section a code', async () => {
    const doc = await readFile(new URL('../docs/errors.md', import.meta.url), 'utf8')
    const documented = [...doc.matchAll(/^## (\S+)$/gm)].map((match) => match[1])
    expect(documented.sort()).toEqual(Object.keys(ERROR_CODES).sort())
  })
})
