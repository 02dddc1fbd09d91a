import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const src = fileURLToPath(new URL('../../src/', import.meta.url))

/**
 * Where SQL may be written (docs/conventions.md, SQL): the statements files, and the reference
 * service, an application of its own on its own tables. Transaction control (BEGIN, COMMIT,
 * ROLLBACK) is not looked for: it belongs with the code that scopes the transaction.
 */
const homes = [/^store\/postgres\/statements[^/]*\.ts$/, /^reference-service\//]

/** A string literal that opens with a statement. */
const STATEMENT = /[`'"]\s*(SELECT|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|(?:CREATE|ALTER|DROP)\s+(?:UNIQUE\s+)?(?:TABLE|INDEX|SCHEMA|DATABASE|TYPE|FUNCTION)|LISTEN|UNLISTEN|NOTIFY|SHOW|SET\s+(?:LOCAL\s+)?\w+\s*(?:=|TO\b))\b/

describe('SQL has one home', () => {
  it('no module outside src/store/postgres/statements*.ts (and the reference service) writes a statement', async () => {
    const files = (await readdir(src, { recursive: true })).filter((file) => file.endsWith('.ts')).map((file) => file.split(path.sep).join('/'))
    const strays: string[] = []
    for (const file of files.filter((file) => !homes.some((home) => home.test(file)))) {
      const lines = (await readFile(path.join(src, file), 'utf8')).split('\n')
      lines.forEach((line, index) => {
        // Doc comments show SQL in their examples; only code counts.
        if (/^\s*(\*|\/\/|\/\*)/.test(line)) return
        const found = STATEMENT.exec(line)
        if (found) strays.push(`src/${file}:${index + 1}: ${found[1]}`)
      })
    }
    expect(strays).toEqual([])
  })
})
