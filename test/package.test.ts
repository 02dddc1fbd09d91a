import { execFile } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildPackageCopy, type BuiltPackage } from './helpers/built-package.js'
import { reachOf } from './helpers/module-reach.js'

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
  exports: Record<string, string>
  bin: Record<string, string>
  dependencies: Record<string, string>
  devDependencies: Record<string, string>
  peerDependencies: Record<string, string>
  peerDependenciesMeta: Record<string, { optional: boolean }>
}

/** dist/x/y.js is built from src/x/y.ts. */
const sourceOf = (target: string) => new URL(`../${target.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts')}`, import.meta.url)

describe('package', () => {
  it('every export and the bin are built from a source file that exists', () => {
    const targets = [...Object.entries(pkg.exports).filter(([name]) => name !== './package.json').map(([, target]) => target), ...Object.values(pkg.bin)]
    expect(targets.filter((target) => !existsSync(sourceOf(target)))).toEqual([])
  })

  it('frameworks are optional peer dependencies', () => {
    for (const name of ['express', 'fastify', 'hono']) expect(pkg.peerDependenciesMeta[name]?.optional).toBe(true)
  })

  it('prom-client is an optional peer dependency, installed for development and the reference service (issue 24)', () => {
    expect(pkg.peerDependenciesMeta['prom-client']?.optional).toBe(true)
    expect(pkg.peerDependencies['prom-client']).toBeDefined()
    expect(pkg.devDependencies['prom-client']).toBeDefined()
    expect(Object.keys(pkg.dependencies)).not.toContain('prom-client')
  })

  it('the library entry points import no framework', () => {
    for (const entry of ['src/index.ts', 'src/store/postgres/index.ts']) {
      const text = readFileSync(new URL(`../${entry}`, import.meta.url), 'utf8')
      expect(text).not.toMatch(/from '(express|fastify|hono)/)
    }
  })
})

// The built package, as a user without prom-client installed gets it. It builds the package, which
// does not depend on PostgreSQL: in CI it runs in the DATABASE_URL pass only.
const buildsHere = process.env.CI !== 'true' || !!process.env.DATABASE_URL
const run = promisify(execFile)

describe.skipIf(!buildsHere)('the built package without prom-client (issue 24)', () => {
  let built: BuiltPackage | undefined
  beforeAll(async () => {
    built = await buildPackageCopy({ without: ['prom-client'] })
  }, 180_000)
  afterAll(async () => {
    await built?.remove()
  })

  const entries = Object.entries(pkg.exports).filter(([name]) => name !== './package.json')
  const distOf = (target: string) => path.join(built?.dir ?? '', target)

  it('has an oncely/ops entry with the operator tools, and the root entry loads none of src/ops', () => {
    const ops = reachOf(distOf(pkg.exports['./ops'] ?? './dist/ops/index.js'))
    expect([...ops.files].some((file) => file.endsWith(path.join('dist', 'ops', 'reconciler.js')))).toBe(true)
    const root = reachOf(distOf(pkg.exports['.'] ?? ''))
    expect([...root.files].filter((file) => file.includes(`${path.sep}dist${path.sep}ops${path.sep}`))).toEqual([])
  })

  it('no entry, and no command of the bin but serve (the reference service), imports prom-client', () => {
    const importers = entries.filter(([, target]) => reachOf(distOf(target)).packages.has('prom-client')).map(([name]) => name)
    expect(importers).toEqual([])
    const commands = path.join(built?.dir ?? '', 'dist/cli/commands')
    const commandImporters = readdirSync(commands)
      .filter((file) => file.endsWith('.js') && reachOf(path.join(commands, file)).packages.has('prom-client'))
    expect(commandImporters).toEqual(['serve.js'])
  })

  it('every entry loads by its name without prom-client, and createMetrics says to install it', { timeout: 60_000 }, async () => {
    const dir = built?.dir ?? ''
    const check = path.join(dir, 'check-entries.mjs')
    await writeFile(
      check,
      `const loaded = {}
for (const name of JSON.parse(process.argv[2])) loaded[name] = await import(name).then(() => 'loaded', (error) => String(error.code ?? error.message))
const missing = await import('prom-client').then(() => 'installed', (error) => error.code)
const { createMetrics } = await import('oncely/metrics')
let metrics
try {
  createMetrics()
  metrics = 'created'
} catch (error) {
  metrics = { code: error.code, message: error.message }
}
console.log(JSON.stringify({ loaded, missing, metrics }))
`,
    )
    const names = entries.map(([name]) => `oncely${name.slice(1)}`)
    const { stdout } = await run(process.execPath, [check, JSON.stringify(names)], { cwd: dir })
    const result = JSON.parse(stdout) as { loaded: Record<string, string>; missing: string; metrics: { code: string; message: string } }
    expect(result.missing).toBe('ERR_MODULE_NOT_FOUND')
    expect(result.loaded).toEqual(Object.fromEntries(names.map((name) => [name, 'loaded'])))
    expect(result.metrics.code).toBe('ONCELY_PEER_MISSING')
    expect(result.metrics.message).toContain('npm install prom-client')
  })
})
