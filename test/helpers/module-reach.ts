import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'

/**
 * Static `import`/`export … from` at the start of a line (so none in a doc comment's example),
 * side-effect imports, and `import('…')` with a literal specifier.
 */
const SPECIFIERS = [
  /^(?:import|export)\s*(?:\{[^}]*\}|\*(?:\s+as\s+\w+)?|\w+(?:\s*,\s*\{[^}]*\})?)\s*from\s*'([^']+)'/gm,
  /^import\s*'([^']+)'/gm,
  /\bimport\(\s*'([^']+)'\s*\)/g,
]

/** What a built module loads, transitively: the files of the package, and the packages it names. */
export interface Reach {
  readonly files: ReadonlySet<string>
  readonly packages: ReadonlySet<string>
}

/** Follows the relative imports of the JavaScript module `entry`, collecting the bare ones by package name. */
export function reachOf(entry: string): Reach {
  const files = new Set<string>()
  const packages = new Set<string>()
  const visit = (file: string) => {
    if (files.has(file)) return
    files.add(file)
    const text = readFileSync(file, 'utf8')
    for (const pattern of SPECIFIERS) {
      for (const [, specifier = ''] of text.matchAll(pattern)) {
        if (specifier.startsWith('.')) {
          const target = path.resolve(path.dirname(file), specifier)
          if (existsSync(target)) visit(target)
        } else if (!specifier.startsWith('node:')) {
          const parts = specifier.split('/')
          packages.add(specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? specifier))
        }
      }
    }
  }
  visit(entry)
  return { files, packages }
}
