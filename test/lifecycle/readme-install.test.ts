import { execFile } from 'node:child_process'
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { buildPackageCopy, type BuiltPackage } from '../helpers/built-package.js'
import { REPO_ROOT } from '../helpers/processes.js'

// THE README'S INSTALL SECTION, AS A USER RUNS IT: in an empty CommonJS project, its `npm install`
// lines (with the packed package in place of `oncely`), then its CommonJS snippet, through Node's
// require(esm). It installs packages, so it runs only with CI=true or ONCELY_INSTALL_TEST=1; it
// does not depend on PostgreSQL, so in CI it runs in the DATABASE_URL pass only (the quick start
// takes the embedded one).
const enabled = (process.env.CI === 'true' && !!process.env.DATABASE_URL) || process.env.ONCELY_INSTALL_TEST === '1'
const run = promisify(execFile)
let built: BuiltPackage | undefined
let project: string | undefined

afterAll(async () => {
  await built?.remove()
  if (project) await rm(project, { recursive: true, force: true })
})

/** The README's `## Install` section: its shell lines and its JavaScript snippet. */
async function installSection(): Promise<{ commands: string[][]; snippet: string }> {
  const readme = await readFile(path.join(REPO_ROOT, 'README.md'), 'utf8')
  const section = /^## Install\n([\s\S]*?)^## /m.exec(readme)?.[1]
  if (!section) throw new Error('README.md has no "## Install" section')
  const shell = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  const snippet = /```js\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  const commands = shell
    .split('\n')
    .map((line) => line.replace(/#.*$/, '').trim())
    .filter(Boolean)
    .map((line) => line.split(/\s+/))
  return { commands, snippet }
}

describe.skipIf(!enabled)("README install section (runs with CI=true in the DATABASE_URL pass, or ONCELY_INSTALL_TEST=1)", () => {
  it('npm install oncely pg and @types/pg in an empty project, then require() it from CommonJS', { timeout: 300_000 }, async () => {
    const { commands, snippet } = await installSection()
    expect(commands.length).toBeGreaterThan(0)
    expect(commands.every(([program, verb]) => program === 'npm' && verb === 'install')).toBe(true)
    expect(snippet).toContain("require('oncely')")

    built = await buildPackageCopy()
    await run('npm', ['pack', '--ignore-scripts', '--silent'], { cwd: built.dir })
    const tarball = (await readdir(built.dir)).find((file) => file.endsWith('.tgz'))
    if (!tarball) throw new Error('npm pack made no tarball')

    project = await mkdtemp(path.join(tmpdir(), 'oncely-install-'))
    await writeFile(path.join(project, 'package.json'), JSON.stringify({ name: 'install-check', version: '1.0.0', private: true }))
    for (const [, ...args] of commands) {
      const packages = args.map((arg) => (arg === 'oncely' ? path.join(built?.dir ?? '', tarball) : arg))
      await run('npm', [...packages, '--prefer-offline', '--no-audit', '--no-fund'], { cwd: project, maxBuffer: 64 << 20 })
    }
    const installed = JSON.parse(await readFile(path.join(project, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> }
    expect(Object.keys(installed.dependencies).sort()).toEqual(['oncely', 'pg'])
    expect(Object.keys(installed.devDependencies)).toEqual(['@types/pg'])

    await writeFile(path.join(project, 'check.cjs'), snippet)
    const { stdout } = await run(process.execPath, ['check.cjs'], { cwd: project })
    const expected = /\/\/ (.+)$/m.exec(snippet)?.[1]
    expect(stdout.trim()).toBe(expected)
  })
})
