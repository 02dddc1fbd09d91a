// Builds dist/ with plain tsc and copies the SQL migrations beside the compiled store.
// Runs as `prepare`, so `npm install` in a checkout leaves a runnable dist/.
import { execFileSync } from 'node:child_process'
import { cpSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const tsc = require.resolve('typescript/bin/tsc')

rmSync('dist', { recursive: true, force: true })
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { stdio: 'inherit' })
cpSync('src/store/postgres/migrations', 'dist/store/postgres/migrations', { recursive: true })
