import { parseArgs } from 'node:util'
import { parseEncryptionKeys } from '../../engine/encryption-keys.js'
import type { KeyDetails, KeySummary } from '../../ops/keys.js'
import { inspectKey, listKeys } from '../../ops/keys.js'
import { releaseKey } from '../../ops/release-key.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'
import { formatAge, OPS_FLAGS, OPS_HELP, staleAfterFrom, writeJson } from '../ops-output.js'
import { openRedisEviction, REDIS_FLAGS, REDIS_HELP, redisUrlFrom, type RedisEviction } from '../redis-eviction.js'

export const command: Command = {
  name: 'keys',
  summary: 'list, show and release idempotency keys',
  help: `usage: oncely keys list [--stuck] [--user U] [--limit N] [--json]
       oncely keys show USER KEY [--encryption-keys ID:BASE64,...] [--json]
       oncely keys release USER KEY [--force] [--redis-url URL] [--json]

list     keys, stuck and suspended claims first (oldest lease first), then the newest
show     one key: state, fingerprint, recovery point, step results with the provider key each
         passed on, lease age, created/expires, the stored response's status and body.
         Values encrypted at rest are decrypted with --encryption-keys (or
         ONCELY_ENCRYPTION_KEYS), id:base64 pairs as the service takes them; one that
         cannot be (no key given, an unknown key id, a wrong key) is named on stderr
release  deletes a key so that the next request with it runs as a NEW operation. Refuses a
         claim a live worker holds; refuses a claim that may have acted (a step result, a
         suspension, a stored outcome, an owner that died mid-way) unless --force, and then
         prints the provider keys the claim used: check them at the provider first, or prefer
         'oncely reconcile', which looks the outcome up. Writes one audit line to stderr.
         With a Redis cache in front (--redis-url or REDIS_URL), evicts the key from it.

  --stuck              only claims that are stuck or suspended
  --user U             only this user's keys
  --limit N            at most N keys (default 100)
  --force              release a claim that may have acted
  --encryption-keys K  the keys to decrypt with, id:base64,id:base64 (default: ONCELY_ENCRYPTION_KEYS)
${REDIS_HELP}
${OPS_HELP}
${DATABASE_HELP}

exit codes: 0 done, 1 no such key, or a value of it could not be decrypted, or the release was refused, or the database failed, or
the key was released but the Redis cache could not be reached to evict it, 2 bad usage or
no database`,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      options: { ...DATABASE_FLAGS, ...OPS_FLAGS, ...REDIS_FLAGS, stuck: { type: 'boolean' }, user: { type: 'string' }, limit: { type: 'string' }, force: { type: 'boolean' }, 'encryption-keys': { type: 'string' } },
      allowPositionals: true,
      strict: true,
    })
    const [action, user, key, ...extra] = positionals
    if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`)
    if (action !== 'list' && action !== 'show' && action !== 'release') throw new UsageError('give an action: list, show or release')
    if (action !== 'list' && (user === undefined || key === undefined)) throw new UsageError(`keys ${action} needs USER and KEY`)
    const staleAfterMs = staleAfterFrom(values)
    const limit = values.limit === undefined ? 100 : Number(values.limit)
    if (!Number.isSafeInteger(limit) || limit <= 0) throw new UsageError(`--limit must be a positive integer, got ${JSON.stringify(values.limit)}`)
    const redisUrl = action === 'release' ? redisUrlFrom(values) : undefined
    const { pool, schema } = openDatabase(values)
    const target = { pool, schema }
    let cache: RedisEviction | undefined
    try {
      if (action === 'list') {
        const keys = await listKeys(target, { stuck: values.stuck === true, staleAfterMs, limit, ...(values.user === undefined ? {} : { scope: values.user }) })
        if (values.json) writeJson(keys)
        else process.stdout.write(keys.length === 0 ? 'no keys\n' : `${keys.map(listLine).join('\n')}\n`)
        return EXIT.ok
      }
      const scope = user as string
      const name = key as string
      if (action === 'show') {
        const keyText = values['encryption-keys'] ?? process.env.ONCELY_ENCRYPTION_KEYS ?? ''
        const encryption = keyText.trim() === '' ? undefined : parseEncryptionKeys(keyText)
        const details = await inspectKey(target, { scope, key: name, staleAfterMs, ...(encryption === undefined ? {} : { encryption }) })
        if (details === undefined) {
          process.stderr.write(`oncely keys: user ${scope} has no key ${JSON.stringify(name)}\n`)
          return EXIT.failure
        }
        if (values.json) writeJson(details)
        else process.stdout.write(showText(details))
        const closed = details.encrypted.filter((field) => !field.opened)
        for (const field of closed) {
          const hint = encryption === undefined ? ' (give the keys with --encryption-keys or ONCELY_ENCRYPTION_KEYS)' : ''
          process.stderr.write(`oncely keys: the ${field.field} is encrypted under key id ${JSON.stringify(field.keyId)} and was not decrypted: ${field.reason ?? ''}${hint}\n`)
        }
        return closed.length === 0 ? EXIT.ok : EXIT.failure
      }
      if (redisUrl !== undefined) cache = await openRedisEviction(redisUrl, schema)
      const result = await releaseKey(target, {
        scope,
        key: name,
        force: values.force === true,
        staleAfterMs,
        log: (line) => process.stderr.write(`${line}\n`),
        ...(cache === undefined ? {} : { cache }),
      })
      // Invariant 10 holds only once the entry is gone: until then it replays the old outcome.
      const evictedFrom = result.released && cache !== undefined ? { evicted: cache.evicted, entry: cache.entryName(scope, name) } : undefined
      if (values.json) writeJson(evictedFrom === undefined ? result : { ...result, cache: evictedFrom })
      else if (result.released) process.stdout.write(`${result.detail}\n${evictedFrom?.evicted ? 'evicted from the Redis cache\n' : ''}${providerKeyLines(result.key)}`)
      else process.stdout.write(`not released: ${result.detail}\n${'key' in result ? providerKeyLines(result.key) : ''}`)
      if (evictedFrom?.evicted === false) {
        process.stderr.write(
          `oncely keys: released in PostgreSQL, but not evicted from the Redis cache: its entry may replay the old answer until it expires. Delete the Redis key ${JSON.stringify(evictedFrom.entry)} by hand\n`,
        )
        return EXIT.failure
      }
      return result.released ? EXIT.ok : EXIT.failure
    } catch (error) {
      process.stderr.write(`oncely keys: ${(error as Error).message}\n`)
      return EXIT.failure
    } finally {
      await cache?.close()
      await pool.end()
    }
  },
}

function listLine(key: KeySummary): string {
  const lease = key.leaseAgeMs === null ? '' : ` lease ${formatAge(key.leaseAgeMs)}`
  const response = key.responseStatus === null ? '' : ` ${key.responseStatus}`
  return `${key.state.padEnd(9)} user=${key.scope} key=${JSON.stringify(key.key)} age ${formatAge(key.ageMs)}${lease}${response}${key.recoveryPoint === null ? '' : ` after ${key.recoveryPoint}`}`
}

function showText(key: KeyDetails): string {
  const lines = [
    `user ${key.scope}, key ${JSON.stringify(key.key)}: ${key.state}${key.expired ? ' (past its TTL: the next request is new)' : ''}`,
    `  fingerprint     ${key.fingerprint}`,
    `  claim           ${key.claimId}`,
    `  recovery point  ${key.recoveryPoint ?? '(none)'}`,
    `  created         ${key.createdAt} (${formatAge(key.ageMs)} ago)`,
    `  expires         ${key.expiresAt}`,
  ]
  if (key.leaseAgeMs !== null) lines.push(`  lease           renewed ${formatAge(key.leaseAgeMs)} ago`)
  if (key.interrupted) lines.push('  interrupted     taken over or suspended before: an earlier owner may have acted')
  if (key.outcomeError !== null) lines.push(`  outcome error   ${key.outcomeError}`)
  const sealed = new Map(key.encrypted.map((field) => [field.field, field]))
  const closed = (field: string) => {
    const found = sealed.get(field)
    return found !== undefined && !found.opened ? `(encrypted under key id ${JSON.stringify(found.keyId)}, not decrypted)` : undefined
  }
  for (const step of key.steps) lines.push(`  step ${step.name}: provider key ${step.providerKey}`, `    ${closed(`step:${step.name}`) ?? JSON.stringify(step.result)}`)
  if (key.encrypted.length > 0) lines.push(`  encrypted       ${key.encrypted.map((field) => `${field.field} under key id ${JSON.stringify(field.keyId)}${field.opened ? '' : ' (not decrypted)'}`).join(', ')}`)
  if (key.response) {
    lines.push(`  response        ${key.response.status}`)
    const closedResponse = closed('response')
    if (closedResponse !== undefined) {
      lines.push(`    ${closedResponse}`)
      return `${lines.join('\n')}\n`
    }
    for (const [name, value] of key.response.headers) lines.push(`    ${name}: ${value}`)
    lines.push(`    ${key.response.bodyEncoding === 'base64' ? `(base64) ${key.response.body}` : key.response.body}`)
  }
  return `${lines.join('\n')}\n`
}

function providerKeyLines(key: KeyDetails): string {
  const lines = key.steps.map((step) => `  step ${step.name}: provider key ${step.providerKey}`)
  lines.push(`  claim ${key.claimId}: a step that began without recording its result used deriveStepKey({ scope, key, claimId, step })`)
  return `${lines.join('\n')}\n`
}
