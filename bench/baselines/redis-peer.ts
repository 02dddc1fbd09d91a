import type { RequestHandler } from 'express'
import { Idempotency, IdempotencyError, IdempotencyErrorCodes } from '@node-idempotency/core'
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis'

/** The route's own work: what it answers, stored by the peer for its replays. */
type Handle = (req: Parameters<RequestHandler>[0], res: Parameters<RequestHandler>[1]) => Promise<{ status: number; body: unknown }>

/**
 * The Redis library a user might pick instead (issue 21's peer): `@node-idempotency/core` on its
 * Redis adapter, glued to Express the way its README shows (`onRequest` before the handler,
 * `onResponse` after it). It keeps nothing durable: no charge row, no record in PostgreSQL.
 * The glue answers 409 for a request in progress and 422 for a reused key, as oncely does.
 */
export async function redisPeer(redisUrl: string, prefix: string): Promise<{ guard: (handle: Handle) => RequestHandler; close: () => Promise<void> }> {
  const storage = new RedisStorageAdapter({ url: redisUrl })
  await storage.connect()
  const idempotency = new Idempotency(storage, { cacheKeyPrefix: prefix, cacheTTLMS: 86_400_000 })
  return {
    guard: (handle) => async (req, res, next) => {
      const request = { method: req.method, path: req.path, headers: req.headers, body: req.body as Record<string, unknown> }
      try {
        const stored = await idempotency.onRequest<unknown, unknown>(request)
        if (stored) {
          res.status(Number(stored.additional?.status ?? 200)).json(stored.body)
          return
        }
      } catch (error) {
        if (!(error instanceof IdempotencyError)) return next(error)
        const status = error.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS ? 409 : error.code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH ? 422 : 400
        res.status(status).json({ type: 'about:blank', title: error.message, status })
        return
      }
      try {
        const answer = await handle(req, res)
        await idempotency.onResponse(request, { body: answer.body, additional: { status: answer.status } })
        res.status(answer.status).json(answer.body)
      } catch (error) {
        next(error)
      }
    },
    close: () => storage.disconnect(),
  }
}
