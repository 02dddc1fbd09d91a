import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const src = fileURLToPath(new URL('../../src/', import.meta.url))
const inAdapters = (file: string) => path.relative(src, file).startsWith(`adapters${path.sep}`)

/** Every module under `src/`, with the modules it imports by relative path. */
async function importGraph(): Promise<Map<string, string[]>> {
  const files = (await readdir(src, { recursive: true })).filter((file) => file.endsWith('.ts')).map((file) => path.join(src, file))
  const graph = new Map<string, string[]>()
  for (const file of files) {
    const text = await readFile(file, 'utf8')
    const targets = [...text.matchAll(/^(?:import|export)\b[^'\n]*?'(\.{1,2}\/[^']+)'/gm)].map((match) => path.resolve(path.dirname(file), (match[1] ?? '').replace(/\.js$/, '.ts')))
    graph.set(file, targets)
  }
  return graph
}

describe('the adapters’ modules', () => {
  it('import each other one way: no cycle passes through src/adapters', async () => {
    const graph = await importGraph()
    const cycles: string[] = []
    const visit = (file: string, trail: string[]) => {
      for (const next of graph.get(file) ?? []) {
        if (next === trail[0]) cycles.push([...trail, next].map((f) => path.relative(src, f)).join(' → '))
        else if (!trail.includes(next) && inAdapters(next)) visit(next, [...trail, next])
      }
    }
    for (const file of graph.keys()) if (inAdapters(file)) visit(file, [file])
    expect(cycles).toEqual([])
  })

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
