import { execFile } from 'node:child_process'
import { chmod, cp, mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { freePort } from '../../src/embedded-postgres/start.js'
import { REPO_ROOT, startProcess } from '../helpers/processes.js'
import { post } from './support/api.js'

// THE README QUICK START, AS A NEW USER RUNS IT: copy the repository, `npm ci`, `npm start`
// (embedded PostgreSQL 18 under ./.oncely/pg, provider as a child), one POST, Ctrl-C (SIGINT to
// the whole process group, as a terminal sends it), a clean exit. It installs packages, so it
// runs only when CI=true or ONCELY_QUICKSTART=1; otherwise it is reported as skipped. CI runs the
// suite twice; the quick start is about a machine with no database, so it runs in the embedded
// run (DATABASE_URL empty) and is skipped in the PostgreSQL 15 run.
const enabled = (process.env.CI === 'true' && !process.env.DATABASE_URL) || process.env.ONCELY_QUICKSTART === '1'
const run = promisify(execFile)
let workdir: string | undefined

afterAll(async () => {
  if (workdir) await rm(workdir, { recursive: true, force: true })
})

describe.skipIf(!enabled)('README quick start (runs with CI=true on the embedded database, or ONCELY_QUICKSTART=1)', () => {
  it('npm ci, npm start, one charge, Ctrl-C: a clean exit and nothing left running', { timeout: 240_000 }, async () => {
    workdir = await mkdtemp(path.join(tmpdir(), 'oncely-quickstart-'))
    // As root, the embedded PostgreSQL runs as the postgres user, which must enter this folder.
    await chmod(workdir, 0o755)
    const { stdout: files } = await run('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: REPO_ROOT, maxBuffer: 16 << 20 })
    for (const file of files.split('\0').filter(Boolean)) {
      const exists = await stat(path.join(REPO_ROOT, file)).then(() => true, () => false)
      if (exists) await cp(path.join(REPO_ROOT, file), path.join(workdir, file), { recursive: true })
    }
    await run('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: workdir, maxBuffer: 64 << 20 })

    const [port, providerPort] = [await freePort(), await freePort()]
    const started = Date.now()
    const app = await startProcess('npm', ['start'], {
      cwd: workdir,
      detached: true,
      readyTimeoutMs: 120_000,
      env: { DATABASE_URL: '', PORT: String(port), PROVIDER_PORT: String(providerPort) },
    })
    try {
      expect(app.url).toBe(`http://127.0.0.1:${port}`)
      expect(app.stdout()).toMatch(/curl /)
      const answer = await post(app.url, { user: '1', key: 'order-1' })
      expect(answer.status).toBe(201)
      const provider = await fetch(`http://127.0.0.1:${providerPort}/v1/charges`)
      expect(((await provider.json()) as { data: unknown[] }).data).toHaveLength(1)
    } finally {
      // Ctrl-C: SIGINT to the whole foreground process group.
      if (app.child.pid !== undefined) process.kill(-app.child.pid, 'SIGINT')
    }
    const exit = await app.exited
    // npm re-raises the SIGINT it got on itself once its child has gone, as it does in a terminal;
    // the service's own clean stop shows in its last line.
    expect(exit.code === 0 || exit.signal === 'SIGINT', JSON.stringify(exit)).toBe(true)
    expect(app.stderr()).toMatch(/^stopped$/m)
    expect(Date.now() - started).toBeLessThan(180_000)
    await expect(stat(path.join(workdir, '.oncely/pg/PG_VERSION'))).resolves.toBeTruthy()
    await expect(stat(path.join(workdir, '.oncely/pg/postmaster.pid'))).rejects.toThrow()
    await expect(fetch(`http://127.0.0.1:${providerPort}/healthz`)).rejects.toThrow()

    // A second `npm start` reuses the data: the first charge is still there to replay.
    const again = await startProcess('npm', ['start'], {
      cwd: workdir,
      detached: true,
      readyTimeoutMs: 60_000,
      env: { DATABASE_URL: '', PORT: String(port), PROVIDER_PORT: String(providerPort) },
    })
    try {
      const replay = await post(again.url, { user: '1', key: 'order-1' })
      expect(replay.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
    } finally {
      if (again.child.pid !== undefined) process.kill(-again.child.pid, 'SIGINT')
    }
    await again.exited
  })
})
