import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const src = fileURLToPath(new URL('../../src/', import.meta.url))
const inAdapters = (file: string) => path.relative(src, file).startsWith(`adapters${path.sep}`)

/**
 * `import`/`export … from` statements (types too, on one line or several), side-effect imports,
 * and `import('…')` types and dynamic imports: every relative path a module names.
 */
const IMPORTS = [
  /^(?:import|export)(?:\s+type)?\s*(?:\{[^}]*\}|\*(?:\s+as\s+\w+)?|\w+(?:\s*,\s*\{[^}]*\})?)\s*from\s*'(\.{1,2}\/[^']+)'/gm,
  /^import\s*'(\.{1,2}\/[^']+)'/gm,
  /\bimport\(\s*'(\.{1,2}\/[^']+)'\s*\)/g,
]

/** Every module under `src/`, with the modules it imports by relative path. */
async function importGraph(): Promise<Map<string, string[]>> {
  const files = (await readdir(src, { recursive: true })).filter((file) => file.endsWith('.ts')).map((file) => path.join(src, file))
  const graph = new Map<string, string[]>()
  for (const file of files) {
    const text = await readFile(file, 'utf8')
    const targets = IMPORTS.flatMap((pattern) => [...text.matchAll(pattern)]).map((match) => path.resolve(path.dirname(file), (match[1] ?? '').replace(/\.js$/, '.ts')))
    graph.set(file, targets)
  }
  return graph
}

/** The strongly connected components of more than one module (Tarjan): each holds a cycle. */
function cyclicComponents(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const components: string[][] = []
  const connect = (file: string) => {
    index.set(file, index.size)
    low.set(file, index.get(file)!)
    stack.push(file)
    for (const next of graph.get(file) ?? []) {
      if (!graph.has(next)) continue
      if (!index.has(next)) {
        connect(next)
        low.set(file, Math.min(low.get(file)!, low.get(next)!))
      } else if (stack.includes(next)) low.set(file, Math.min(low.get(file)!, index.get(next)!))
    }
    if (low.get(file) !== index.get(file)) return
    const component = stack.splice(stack.indexOf(file))
    if (component.length > 1 || (graph.get(file) ?? []).includes(file)) components.push(component.map((f) => path.relative(src, f)).sort())
  }
  for (const file of graph.keys()) if (!index.has(file)) connect(file)
  return components
}

describe("src's modules", () => {
  it('import each other one way: no import cycle anywhere in src, type imports included (issue 24)', async () => {
    const graph = await importGraph()
    expect([...graph.values()].flat().filter((target) => !graph.has(target))).toEqual([])
    expect(cyclicComponents(graph)).toEqual([])
  })
})

describe('the layers (adapters → engine → store)', () => {
  /** The folder under src a module lives in, or '' for the neutral modules at its top (errors, logger…). */
  const layerOf = (file: string) => {
    const parts = path.relative(src, file).split(path.sep)
    return parts.length === 1 ? '' : (parts[0] ?? '')
  }
  // The entry points (`index.ts`) gather every layer: they are not neutral.
  const neutral = (file: string) => layerOf(file) === '' && path.basename(file) !== 'index.ts'

  it('the engine imports only itself and the neutral modules; the adapters only the engine besides (issue 24)', async () => {
    const graph = await importGraph()
    const crossings: string[] = []
    for (const [file, targets] of graph) {
      const allowed = { engine: ['engine'], adapters: ['adapters', 'engine'] }[layerOf(file)]
      if (allowed === undefined) continue
      for (const target of targets) if (!neutral(target) && !allowed.includes(layerOf(target))) crossings.push(`${path.relative(src, file)} → ${path.relative(src, target)}`)
    }
    expect(crossings).toEqual([])
  })
})

describe('the reference service', () => {
  it('imports only the package’s public entries (the export map’s sources) and the embedded PostgreSQL tool (issue 24)', async () => {
    const graph = await importGraph()
    const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { exports: Record<string, string> }
    const entries = new Set(Object.values(pkg.exports).filter((target) => target.startsWith('./dist/')).map((target) => path.join(src, target.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts'))))
    const inside = (file: string, folder: string) => path.relative(src, file).startsWith(`${folder}${path.sep}`)
    const reaches: string[] = []
    for (const [file, targets] of graph) {
      if (!inside(file, 'reference-service')) continue
      for (const target of targets) {
        if (!inside(target, 'reference-service') && !inside(target, 'embedded-postgres') && !entries.has(target)) reaches.push(`${path.relative(src, file)} → ${path.relative(src, target)}`)
      }
    }
    expect(reaches).toEqual([])
  })
})

describe('the adapters’ modules', () => {
  it('define each shared helper once in src/adapters (one home each)', async () => {
    const graph = await importGraph()
    const adapters = [...graph.keys()].filter(inAdapters)
    const texts = await Promise.all(adapters.map((file) => readFile(file, 'utf8')))
    for (const helper of ['toBytes', 'isJsonContentType', 'problem', 'isRetryableStatus', 'invalid', 'positiveInteger', 'optionalFunction', 'stringList']) {
      const homes = texts.filter((text) => new RegExp(`^(export )?function ${helper}\\b`, 'm').test(text))
      expect(homes.length, helper).toBeLessThanOrEqual(1)
    }
    expect(texts.filter((text) => text.includes(String.raw`application\/([\w.+-]*\+)?json`)).length).toBeLessThanOrEqual(1)
  })
})
