import type { Request } from 'express'

/** The matched route's pattern, with its mount path; the path when mounted globally. Express and NestJS (on Express) share it. */
export function routePattern(req: Request): string {
  const routePath: unknown = (req.route as { path?: unknown } | undefined)?.path
  return typeof routePath === 'string' ? `${req.baseUrl}${routePath}` : `${req.baseUrl}${req.path}`
}
