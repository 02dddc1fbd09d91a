import { execFile } from 'node:child_process'
import { readdir, readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildPackageCopy, type BuiltPackage } from '../helpers/built-package.js'
import { REPO_ROOT } from '../helpers/processes.js'

// THE BUILT PACKAGE, as `npm run build` (and `prepare`, on install and pack) leaves it. It does
// not depend on PostgreSQL, so it runs in one of CI's two passes only: the DATABASE_URL pass
// (the embedded pass carries the npm start lifecycle tests).
const enabled = !!process.env.DATABASE_URL
const run = promisify(execFile)
let built: BuiltPackage | undefined

beforeAll(async () => {
  if (enabled) built = await buildPackageCopy()
}, 120_000)
afterAll(async () => {
  await built?.remove()
})

const dist = (...parts: string[]) => path.join(built?.dir ?? '', 'dist', ...parts)

describe.skipIf(!enabled)('the build (DATABASE_URL pass only)', () => {
  it('sets the run bit on the bin, so `npx oncely` runs it directly', async () => {
    const { mode } = await stat(dist('cli/main.js'))
    expect(mode & 0o111).toBe(0o111)
    const { version } = JSON.parse(await readFile(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }
    // Executed as a file, through its #! line, as npm's bin link does.
    const { stdout } = await run(dist('cli/main.js'), ['--version'])
    expect(stdout).toBe(`${version}\n`)
  })

  it('embeds the migrations in a module: no .sql file is shipped or read at run time', async () => {
    const sources = (await readdir(path.join(REPO_ROOT, 'src/store/postgres/migrations'))).filter((file) => file.endsWith('.sql')).sort()
    expect(sources.length).toBeGreaterThan(0)
    await expect(stat(dist('store/postgres/migrations'))).rejects.toThrow()
    const compiled = await readFile(dist('store/postgres/migration-files.js'), 'utf8')
    expect(compiled).not.toMatch(/node:fs|readFile|readdir/)
    const module = (await import(pathToFileURL(dist('store/postgres/migration-files.js')).href)) as { MIGRATION_FILES: Array<{ name: string; sql: string }> }
    expect(module.MIGRATION_FILES.map((file) => `${file.name}.sql`)).toEqual(sources)
    for (const file of module.MIGRATION_FILES) {
      expect(file.sql).toBe(await readFile(path.join(REPO_ROOT, 'src/store/postgres/migrations', `${file.name}.sql`), 'utf8'))
    }
    const { stdout } = await run(process.execPath, [dist('cli/main.js'), 'migrate', '--dry-run', '--schema', 'Built'])
    expect(stdout).toContain('CREATE TABLE "Built".idempotency_key')
  })
})
