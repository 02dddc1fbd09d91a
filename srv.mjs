import http from 'node:http'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
const s = http.createServer((req, res) => { let n = 0; req.on('data', (c) => (n += c.length)); req.on('end', () => { res.writeHead(201); res.end(String(n)) }) })
s.listen(0, '127.0.0.1', async () => {
  for (const mib of ['0', '128', '128']) {
    const r = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'test/client/fixtures/large-body.ts', `http://127.0.0.1:${s.address().port}`, mib], { encoding: 'utf8' }).catch((e) => e)
    console.log(mib, r.stdout, (r.stderr ?? '').slice(0, 300))
  }
  s.close()
})
