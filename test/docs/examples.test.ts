import { execFile } from 'node:child_process'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { extractDocExamples, extractMarkdownExamples } from './extract-examples.js'

const run = promisify(execFile)
const root = fileURLToPath(new URL('../../', import.meta.url))
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')

describe('doc examples (docs/conventions.md, Code)', () => {
  it('every @example in the public API, and every TypeScript block of the docs, type-checks as written', { timeout: 120_000 }, async () => {
    const fromSource = await extractDocExamples(`${root}src`)
    expect(fromSource.length).toBeGreaterThan(20)
    const fromDocs = (await Promise.all(['README.md', 'docs/client.md', 'docs/adapters.md', 'docs/reference-service.md', 'docs/operations.md', 'docs/outbox.md', 'docs/redis.md', 'docs/encryption.md'].map((file) => extractMarkdownExamples(`${root}${file}`).catch(() => [])))).flat()
    const examples = [...fromSource, ...fromDocs]
    // Inside the repository, so that `oncely/...` and the dependencies resolve as for a user.
    const dir = `${root}.doc-examples`
    await rm(dir, { recursive: true, force: true })
    await mkdir(dir, { recursive: true })
    await writeFile(`${dir}/tsconfig.json`, JSON.stringify({ extends: '../tsconfig.json', include: ['./*.ts', '../test/docs/prelude.ts'] }))
    await Promise.all(
      examples.map((example, index) =>
        writeFile(`${dir}/example-${index}.ts`, `// ${example.origin}\n${example.code}\nexport {}\n`),
      ),
    )
    const result = await run(process.execPath, [tsc, '-p', `${dir}/tsconfig.json`], { cwd: root }).then(
      () => '',
      (error: { stdout?: string; message?: string }) => error.stdout ?? error.message ?? 'tsc failed',
    )
    // Name each failing example by where it is written, not by its generated file.
    const failures = result
      .split('\n')
      .filter((line) => line.includes('error TS'))
      .map((line) => {
        const index = /example-(\d+)\.ts/.exec(line)?.[1]
        return `${index === undefined ? '' : examples[Number(index)]?.origin}: ${line.replace(/^.*error /, 'error ')}`
      })
    await rm(dir, { recursive: true, force: true })
    expect(failures).toEqual([])
  })
})
