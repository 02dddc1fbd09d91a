import { afterAll, beforeAll, expect, it } from 'vitest'
import { libraryBench } from '../../bench/library.js'
import type { Figure } from '../../bench/report.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// `npm run bench -- --only library` for a moment: its raw loop binds the store's own statements
// by hand, so a statement that gains a parameter must break this test, not the next bench run
// (it did: the raw claim sent 7 values to an 8-parameter statement). No duration is asserted
// (docs/conventions.md, "Benchmarks are not tests").

let db: TestDatabase
let figures: Figure[]
beforeAll(async () => {
  db = await createTestDatabase()
  figures = await libraryBench(db.url, { concurrency: 2, seconds: 0.2, rounds: 1, warmUpSeconds: 0.1, schema: `${db.schema}_library` })
}, 180_000)
afterAll(async () => {
  await db.close()
})

it('runs the engine and the raw pg loop for fresh, replay and conflict, each against its raw baseline', () => {
  expect(figures.map((f) => [f.name, f.baseline.name])).toEqual([
    ['engine fresh', 'raw pg fresh'],
    ['engine replay', 'raw pg replay'],
    ['engine conflict', 'raw pg conflict'],
  ])
  for (const f of figures) {
    for (const value of [...f.runs, f.baseline.value, f.ratio]) expect(Number.isFinite(value) && value > 0, `${f.name}: ${value}`).toBe(true)
    // This process's CPU per operation, the engine's and the raw loop's: measured, so above zero.
    for (const column of ['CPU-ms/op', 'baseline CPU-ms/op']) expect(Number(f.extra?.[column]), `${f.name} ${column}`).toBeGreaterThan(0)
  }
})
