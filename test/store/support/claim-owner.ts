// A key's owner in a process of its own, for test/store/claim-watch.test.ts: claims the key, says
// `claimed <claim id>`, completes it when told `complete` on stdin, says `completed`, and exits.
//   node --import tsx test/store/support/claim-owner.ts <database url> <schema> <scope> <key> <fingerprint>
import { createInterface } from 'node:readline'
import pg from 'pg'
import { createEngine } from '../../../src/index.js'
import { createPostgresStore } from '../../../src/store/postgres/index.js'

const [url, schema, scope, key, fingerprint] = process.argv.slice(2) as [string, string, string, string, string]
const pool = new pg.Pool({ connectionString: url, max: 2 })
const engine = createEngine({ store: createPostgresStore({ pool, schema, listen: false }), staleAfterMs: 30_000 })
const decision = await engine.begin({ scope, key, fingerprint })
if (decision.kind !== 'execute') throw new Error(`expected to own the key, got ${decision.kind}`)
process.stdout.write(`claimed ${decision.execution.claimId}\n`)
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== 'complete') continue
  await decision.execution.complete({ status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_child"}') })
  process.stdout.write('completed\n')
  break
}
await pool.end()
