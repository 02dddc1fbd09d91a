import { mkdtemp, rm } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { claimFolder, SOCKET_NAME } from '../../src/reference-service/folder-owner.js'

// The folder's claim is released at the end of every stop (issue 22): nothing a local process
// does with the claim's socket may hold that stop.
let folder: string | undefined

afterEach(async () => {
  if (folder) await rm(folder, { recursive: true, force: true })
})

describe('the folder claim', () => {
  it('is released while a peer keeps its half of a connection to the socket open', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'oncely-claim-'))
    folder = dir
    const claim = await claimFolder(dir)
    const peer = connect({ path: path.join(dir, SOCKET_NAME), allowHalfOpen: true })
    let answer = ''
    peer.setEncoding('utf8').on('data', (chunk: string) => (answer += chunk))
    // The owner has answered and ended its half; the peer keeps its own open.
    await new Promise<void>((resolve) => peer.once('end', () => resolve()))
    expect(JSON.parse(answer)).toEqual({ pid: process.pid })

    try {
      await claim.release()
      // Released: the socket no longer answers, so the next start may claim the folder.
      const probe = connect(path.join(dir, SOCKET_NAME))
      const refused = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => probe.once('error', resolve).once('connect', () => resolve(undefined)))
      probe.destroy()
      expect(refused?.code).toMatch(/^(ENOENT|ECONNREFUSED)$/)
    } finally {
      peer.destroy()
    }
  })
})
