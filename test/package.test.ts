import { existsSync, readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
  exports: Record<string, string>
  bin: Record<string, string>
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

  it('the library entry points import no framework', () => {
    for (const entry of ['src/index.ts', 'src/store/postgres/index.ts']) {
      const text = readFileSync(new URL(`../${entry}`, import.meta.url), 'utf8')
      expect(text).not.toMatch(/from '(express|fastify|hono)/)
    }
  })
})
