import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'

export interface DocExample {
  /** Where it was found, as `file:line`. */
  origin: string
  code: string
}

/** Every ```ts block inside a `@example` of a doc comment under `root`. */
export async function extractDocExamples(root: string): Promise<DocExample[]> {
  const examples: DocExample[] = []
  for (const file of await sourceFiles(root)) {
    const text = await readFile(file, 'utf8')
    const lines = text.split('\n')
    for (let i = 0; i < lines.length; i++) {
      if (!/^\s*\*\s*@example\s*$/.test(lines[i] ?? '')) continue
      const open = lines.findIndex((line, j) => j > i && /^\s*\*\s*```ts\s*$/.test(line))
      const close = lines.findIndex((line, j) => j > open && /^\s*\*\s*```\s*$/.test(line))
      if (open < 0 || close < 0) continue
      const code = lines
        .slice(open + 1, close)
        .map((line) => line.replace(/^\s*\* ?/, ''))
        .join('\n')
      examples.push({ origin: `${path.relative(process.cwd(), file)}:${open + 2}`, code })
      i = close
    }
  }
  return examples
}

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true })
  const nested = await Promise.all(
    entries.map((entry) => {
      const full = path.join(dir, entry.name)
      if (entry.isDirectory()) return sourceFiles(full)
      return Promise.resolve(entry.name.endsWith('.ts') ? [full] : [])
    }),
  )
  return nested.flat().sort()
}

/** Every ```ts block of a Markdown file. */
export async function extractMarkdownExamples(file: string): Promise<DocExample[]> {
  const lines = (await readFile(file, 'utf8')).split('\n')
  const examples: DocExample[] = []
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] !== '```ts') continue
    const close = lines.findIndex((line, j) => j > i && line === '```')
    if (close < 0) break
    examples.push({ origin: `${path.relative(process.cwd(), file)}:${i + 2}`, code: lines.slice(i + 1, close).join('\n') })
    i = close
  }
  return examples
}
