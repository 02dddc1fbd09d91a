// Builds dist/ with plain tsc. Runs as `prepare`, so `npm install` in a checkout leaves a
// runnable dist/. `node scripts/build.mjs OUT_DIR` builds elsewhere (the tests build a package
// copy this way).
import { execFileSync } from 'node:child_process'
import { chmodSync, rmSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeEmbeddedMigrations } from './embed-migrations.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const outDir = path.resolve(process.argv[2] ?? path.join(root, 'dist'))
const require = createRequire(import.meta.url)
const tsc = require.resolve('typescript/bin/tsc')

rmSync(outDir, { recursive: true, force: true })
execFileSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.build.json'), '--outDir', outDir], { stdio: 'inherit' })
writeEmbeddedMigrations(path.join(root, 'src/store/postgres/migrations'), path.join(outDir, 'store/postgres/migration-files.js'))

// tsc writes files without the run bit; `bin` must have it, or `npx oncely` says "Permission denied".
const bin = path.join(outDir, 'cli/main.js')
chmodSync(bin, statSync(bin).mode | 0o111)
