import { connect, createServer, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'

/** Where the kit's proxy cuts a connection: once the request is through, or after one answer byte. */
export type CutMode = 'before-response' | 'after-first-byte'

export interface CutReport {
  /** Whether the connection was cut where asked; when not, `detail` says what happened instead. */
  readonly cut: boolean
  readonly detail: string
}

/**
 * A TCP proxy of the kit's own on 127.0.0.1, in front of the target: it forwards bytes both
 * ways and cuts the next connection at the point asked, closing both sides, as a client's
 * network failing mid-request does.
 */
export interface CutProxy {
  readonly port: number
  /** Arms the cut of the next connection; settles once it is cut, or ended some other way. */
  cutNext(mode: CutMode, requestBytes: number): Promise<CutReport>
  close(): Promise<void>
}

export async function startCutProxy(host: string, port: number): Promise<CutProxy> {
  const sockets = new Set<Socket>()
  let plan: { mode: CutMode; requestBytes: number; settle: (report: CutReport) => void } | undefined
  const track = (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    return socket
  }

  const server = createServer((client) => {
    track(client)
    const armed = plan
    plan = undefined
    const upstream = track(connect(port, host))
    let settled = false
    const end = (report: CutReport) => {
      client.destroy()
      upstream.destroy()
      if (!settled) armed?.settle(report)
      settled = true
    }
    let forwarded = 0
    client.on('data', (chunk: Buffer) => {
      forwarded += chunk.length
      upstream.write(chunk, () => {
        if (armed?.mode === 'before-response' && forwarded >= armed.requestBytes) end({ cut: true, detail: `cut after the ${forwarded} request bytes were forwarded, before any answer byte` })
      })
    })
    upstream.on('data', (chunk: Buffer) => {
      if (armed?.mode === 'after-first-byte') {
        upstream.pause()
        client.write(chunk.subarray(0, 1), () => end({ cut: true, detail: 'cut after the first answer byte reached the client' }))
      } else if (armed === undefined) client.write(chunk)
    })
    const early = (what: string) => () => end({ cut: false, detail: `${what} before the cut (${forwarded} request bytes forwarded)` })
    upstream.on('end', early('the target closed the connection'))
    upstream.on('error', early('the connection to the target failed'))
    client.on('end', early('the client closed'))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  return {
    port: (server.address() as AddressInfo).port,
    cutNext(mode, requestBytes) {
      return new Promise((settle) => {
        plan = { mode, requestBytes, settle }
      })
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
