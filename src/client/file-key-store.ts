import { createHash, randomUUID } from 'node:crypto'
import { link, mkdir, open, readdir, readFile, rename, stat, unlink } from 'node:fs/promises'
import path from 'node:path'
import type { KeyStore, OperationOutcome, OperationRecord } from './key-store.js'

const RECORD_SUFFIX = '.json'
const TEMP_SUFFIX = '.tmp'
/** A temp file this old was left by a process that died between writing and publishing it. */
const ABANDONED_TEMP_MS = 60 * 60 * 1000

/**
 * A key store in a directory: one JSON file per operation, named by the SHA-256 of its
 * `operationId`. Safe for several processes sharing the directory on one machine:
 *
 * - a record is written to a temp file and fsynced, then published with `link(2)`, which fails
 *   if the name exists, so concurrent claims agree on the first record and no reader ever sees
 *   a half-written file; the directory is fsynced before any claim resolves, also one that
 *   returns a record another process published (it may not have fsynced it yet);
 * - updates are written the same way and published with an atomic `rename(2)`;
 * - `prune` skips a record it cannot read (and keeps it) rather than stopping.
 *
 * The directory is created if missing. It needs a local file system with hard links (not every
 * network or FAT mount has them).
 *
 * @example
 * ```ts
 * import { createClient, fileKeyStore } from 'oncely/client'
 * const client = createClient({ baseUrl: 'http://127.0.0.1:3000', keyStore: fileKeyStore('./.oncely/keys') })
 * ```
 */
export function fileKeyStore(directory: string): KeyStore {
  const root = path.resolve(directory)
  let ready: Promise<void> | undefined
  const ensureDirectory = (): Promise<void> => {
    ready ??= mkdir(root, { recursive: true }).then(
      (created) => (created === undefined ? undefined : fsyncNewDirectories(created, root)),
      (error: unknown) => {
        ready = undefined
        throw error
      },
    )
    return ready
  }
  const recordPath = (operationId: string): string =>
    path.join(root, createHash('sha256').update(operationId).digest('hex') + RECORD_SUFFIX)
  const tempPath = (finalPath: string): string => `${finalPath}.${process.pid}.${randomUUID()}${TEMP_SUFFIX}`
  const durable = async (record: OperationRecord): Promise<OperationRecord> => {
    await fsyncDirectory(root)
    return record
  }

  return {
    async claim(candidate) {
      await ensureDirectory()
      const finalPath = recordPath(candidate.operationId)
      const existing = await readRecord(finalPath)
      // A record this claim did not write may be another process's, linked and not yet fsynced
      // by it: the key is only returned, and sent, once its name survives a crash.
      if (existing) return durable(existing)
      const temp = tempPath(finalPath)
      await writeDurably(temp, candidate)
      let published: OperationRecord
      try {
        await link(temp, finalPath)
        published = candidate
      } catch (error) {
        if (errorCode(error) !== 'EEXIST') throw error
        const winner = await readRecord(finalPath)
        if (!winner) throw new Error(`key store file ${finalPath} vanished while claiming it`, { cause: error })
        published = winner
      } finally {
        await unlinkIfPresent(temp)
      }
      return durable(published)
    },

    async finish(operationId: string, outcome: OperationOutcome) {
      await ensureDirectory()
      const finalPath = recordPath(operationId)
      const existing = await readRecord(finalPath)
      if (!existing) return
      const temp = tempPath(finalPath)
      await writeDurably(temp, { ...existing, ...outcome })
      try {
        await rename(temp, finalPath)
      } catch (error) {
        await unlinkIfPresent(temp)
        throw error
      }
      await fsyncDirectory(root)
    },

    async prune(now = new Date()) {
      await ensureDirectory()
      let pruned = 0
      for (const name of await readdir(root)) {
        const file = path.join(root, name)
        if (name.endsWith(TEMP_SUFFIX)) {
          const info = await stat(file).catch(() => undefined)
          if (info && now.getTime() - info.mtimeMs > ABANDONED_TEMP_MS) await unlinkIfPresent(file)
          continue
        }
        if (!name.endsWith(RECORD_SUFFIX)) continue
        // One unreadable record (corrupt, unreadable, a directory) must not stop the others from
        // being pruned; it is kept, and a claim of its own operation still reports it.
        const record = await readRecord(file).catch(() => undefined)
        if (record?.expiresAt && record.expiresAt <= now && (await unlinkIfPresent(file))) pruned++
      }
      if (pruned > 0) await fsyncDirectory(root)
      return pruned
    },
  }
}

interface StoredRecord {
  operationId: string
  key: string
  fingerprint: string
  createdAt: string
  finishedAt: string | null
  finalStatus: number | null
  expiresAt: string | null
}

async function writeDurably(file: string, record: OperationRecord): Promise<void> {
  const stored: StoredRecord = {
    operationId: record.operationId,
    key: record.key,
    fingerprint: record.fingerprint,
    createdAt: record.createdAt.toISOString(),
    finishedAt: record.finishedAt?.toISOString() ?? null,
    finalStatus: record.finalStatus,
    expiresAt: record.expiresAt?.toISOString() ?? null,
  }
  const handle = await open(file, 'wx', 0o600)
  try {
    await handle.writeFile(JSON.stringify(stored) + '\n')
    await handle.sync()
  } finally {
    await handle.close()
  }
}

async function readRecord(file: string): Promise<OperationRecord | undefined> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return undefined
    throw error
  }
  let stored: StoredRecord
  try {
    stored = JSON.parse(text) as StoredRecord
  } catch (error) {
    throw new Error(`key store file ${file} is not valid JSON`, { cause: error })
  }
  if (typeof stored.key !== 'string' || typeof stored.fingerprint !== 'string' || typeof stored.operationId !== 'string') {
    throw new Error(`key store file ${file} does not hold an operation record`)
  }
  return {
    operationId: stored.operationId,
    key: stored.key,
    fingerprint: stored.fingerprint,
    createdAt: new Date(stored.createdAt),
    finishedAt: stored.finishedAt === null ? null : new Date(stored.finishedAt),
    finalStatus: stored.finalStatus,
    expiresAt: stored.expiresAt === null ? null : new Date(stored.expiresAt),
  }
}

/** Makes the directory entry itself (a new, renamed or deleted name) survive a crash. */
async function fsyncDirectory(directory: string): Promise<void> {
  const handle = await open(directory, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}

/** Makes directories just created survive a crash: each one's entry lives in its parent. */
async function fsyncNewDirectories(firstCreated: string, deepest: string): Promise<void> {
  for (let directory = deepest; ; directory = path.dirname(directory)) {
    await fsyncDirectory(path.dirname(directory))
    if (directory === firstCreated || path.dirname(directory) === directory) return
  }
}

async function unlinkIfPresent(file: string): Promise<boolean> {
  try {
    await unlink(file)
    return true
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return false
    throw error
  }
}

function errorCode(error: unknown): unknown {
  return typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined
}
