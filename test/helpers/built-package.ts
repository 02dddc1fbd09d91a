import { execFile } from 'node:child_process'
import { chmod, copyFile, mkdir, mkdtemp, readdir, realpath, rm, symlink } from 'node:fs/promises'
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
 * node_modules linked to the repository's, less the `without` packages), so a test runs `npm start`
 * or the `oncely` bin exactly as a user would, without touching the repository's own dist/ or .oncely/.
 */
export async function buildPackageCopy(options: { without?: readonly string[] } = {}): Promise<BuiltPackage> {
  const dir = await mkdtemp(path.join(tmpdir(), 'oncely-package-'))
  // As root, the embedded PostgreSQL runs as the postgres user, which must enter this folder.
  await chmod(dir, 0o755)
  await copyFile(path.join(REPO_ROOT, 'package.json'), path.join(dir, 'package.json'))
  const modules = await realpath(path.join(REPO_ROOT, 'node_modules'))
  if (options.without === undefined) {
    await symlink(modules, path.join(dir, 'node_modules'))
  } else {
    // `without` packages are missing, as for a user who did not install an optional peer: every
    // other package is linked one by one (nothing above the temporary folder holds one).
    await mkdir(path.join(dir, 'node_modules'))
    for (const name of await readdir(modules)) {
      if (!options.without.includes(name)) await symlink(path.join(modules, name), path.join(dir, 'node_modules', name))
    }
  }
  await run(process.execPath, [path.join(REPO_ROOT, 'scripts/build.mjs'), path.join(dir, 'dist')], { cwd: REPO_ROOT, maxBuffer: 16 << 20 })
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) }
}
