import { execFile } from 'node:child_process'
import { chmod, copyFile, mkdtemp, realpath, rm, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { REPO_ROOT } from './processes.js'

const run = promisify(execFile)

/** A folder holding this repository's package.json and a fresh `dist/`, as `npm install` leaves a checkout. */
export interface BuiltPackage {
  readonly dir: string
  remove(): Promise<void>
}

/**
 * Builds the package with its own build script into a temporary folder (package.json, dist/, and
 * node_modules linked to the repository's), so a test runs `npm start` or the `oncely` bin exactly
 * as a user would, without touching the repository's own dist/ or .oncely/.
 */
export async function buildPackageCopy(): Promise<BuiltPackage> {
  const dir = await mkdtemp(path.join(tmpdir(), 'oncely-package-'))
  // As root, the embedded PostgreSQL runs as the postgres user, which must enter this folder.
  await chmod(dir, 0o755)
  await copyFile(path.join(REPO_ROOT, 'package.json'), path.join(dir, 'package.json'))
  await symlink(await realpath(path.join(REPO_ROOT, 'node_modules')), path.join(dir, 'node_modules'))
  await run(process.execPath, [path.join(REPO_ROOT, 'scripts/build.mjs'), path.join(dir, 'dist')], { cwd: REPO_ROOT, maxBuffer: 16 << 20 })
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) }
}
