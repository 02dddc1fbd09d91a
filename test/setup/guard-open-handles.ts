import { afterAll } from 'vitest'

/**
 * The suite guards itself (docs/conventions.md, Tests). Helpers that open a pool, server or
 * process register it here; a test file that ends with one still open fails, naming it.
 */
const open = new Map<number, string>()
let nextId = 0

export function trackOpenHandle(description: string): () => void {
  const id = nextId++
  open.set(id, description)
  return () => {
    open.delete(id)
  }
}

afterAll(() => {
  if (open.size > 0) {
    const names = [...open.values()]
    open.clear()
    throw new Error(`left open at the end of the file: ${names.join(', ')}`)
  }
})
