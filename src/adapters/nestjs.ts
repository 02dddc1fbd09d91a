/// <reference types="reflect-metadata" />
import { createParamDecorator, Inject, Injectable, Module, type CallHandler, type DynamicModule, type ExecutionContext, type NestInterceptor } from '@nestjs/common'
import { RESPONSE_PASSTHROUGH_METADATA, ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js'
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js'
import { APP_INTERCEPTOR } from '@nestjs/core'
import type { Request, Response } from 'express'
import { catchError, from, of, type Observable } from 'rxjs'
import { invalid } from '../option-validation.js'
import { requestHasBody } from './body.js'
import { captureServerResponse, sendAnswer, setKeyTtl } from './capture-server-response.js'
import { withDictionaryPropertiesWhenSwapped } from './dictionary-properties.js'
import { routePattern } from './express-route.js'
import { beginGuarded, responseClosed, isGuarded, resolveAdapterOptions, type AdapterOptions, type IdempotencyContext, type ResolvedAdapterOptions } from './http.js'

export { PROBLEM_TYPES } from './answers.js'
export type { AdapterOptions, CompletionWork, IdempotencyContext, OutcomeEvent } from './http.js'

/** Options of `IdempotencyModule.forRoot`: the common ones, plus where the interceptor applies. */
export interface IdempotencyModuleOptions<Tx = unknown> extends AdapterOptions<Request, Tx> {
  /**
   * Register the interceptor for every route (`APP_INTERCEPTOR`); the `methods` and `routes`
   * options still choose which requests need a key. (Default: `false`: apply it with
   * `@UseInterceptors(IdempotencyInterceptor)` on a controller or a route)
   */
  applyToAllRoutes?: boolean
}

/** The injection token of the resolved options. */
export const IDEMPOTENCY_OPTIONS = Symbol('oncely:idempotency-options')

/**
 * Where a guarded request keeps its context for `@Idempotency()`: on the request itself, not in a
 * module-wide WeakMap, whose values V8's young collections keep until a full one, each with the
 * execution it reaches (issue 21). Not enumerable, so nothing that copies the request takes it.
 */
const CONTEXT = Symbol('oncely.idempotencyContext')

/**
 * The NestJS interceptor (on `@nestjs/platform-express`): a guarded request needs an
 * `Idempotency-Key`; a repeat gets the stored response, a concurrent one 409, a different
 * payload 422. The handler reaches its execution and `writeOnCompletion` through `@Idempotency()`.
 */
export class IdempotencyInterceptor implements NestInterceptor {
  readonly #options: ResolvedAdapterOptions<Request, unknown>

  constructor(options: ResolvedAdapterOptions<Request, unknown>) {
    this.#options = options
  }

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (context.getType() !== 'http') return next.handle()
    const req = context.switchToHttp().getRequest<Request>()
    const res = context.switchToHttp().getResponse<Response>()
    const route = routePattern(req)
    if (!isGuarded(this.#options, req.method, route)) return next.handle()
    // On Express, both objects' prototypes were swapped (see withDictionaryPropertiesWhenSwapped).
    withDictionaryPropertiesWhenSwapped(req, res)
    const gate = await beginGuarded(this.#options, req, {
      method: req.method,
      route,
      params: req.params as Record<string, string>,
      query: req.query,
      body: req.body as unknown,
      bodyNotRead: req.body === undefined && requestHasBody(req.headers),
      mediaType: req.headers['content-type'],
      key: req.headers['idempotency-key'],
      clientGone: responseClosed(res),
    })
    if (gate.kind !== 'answer') setKeyTtl(res, this.#options.keyTtlSeconds)
    if (gate.kind === 'unkeyed') {
      res.once('close', () => gate.finish(res.statusCode))
      return next.handle()
    }
    if (gate.kind === 'answer') {
      // The handler does not run. A route that answers through `@Res()` gets nothing from Nest,
      // so the answer is sent here; otherwise Nest's own reply is held and replaced by it.
      if (handlesOwnResponse(context)) sendAnswer(res, gate.answer)
      else captureServerResponse(res, { settle: async () => gate.answer }, this.#options.log)
      return of(undefined)
    }
    Object.defineProperty(req, CONTEXT, { value: gate.guard.context, configurable: true })
    const thrown = captureServerResponse(res, gate.guard, this.#options.log)
    // Nest's exception filter only ends a response whose status line went out: a throw after a
    // streamed response started must cut it here, or its truncated body would be stored whole.
    const cutThenRethrow = async (error: unknown): Promise<never> => {
      await thrown(error)
      throw error
    }
    return next.handle().pipe(catchError((error: unknown) => from(cutThenRethrow(error))))
  }
}
Injectable()(IdempotencyInterceptor)
Inject(IDEMPOTENCY_OPTIONS)(IdempotencyInterceptor, undefined, 0)

/**
 * The global module that provides `IdempotencyInterceptor` with its options, validated once
 * at start-up.
 *
 * @example
 * ```ts
 * import { Body, Controller, Module, Post, UseInterceptors } from '@nestjs/common'
 * import { Idempotency, IdempotencyInterceptor, IdempotencyModule, type IdempotencyContext } from 'oncely/nestjs'
 * import type { Queryable } from 'oncely/postgres'
 *
 * @Controller('v1')
 * class ChargesController {
 *   @Post('charges')
 *   @UseInterceptors(IdempotencyInterceptor)
 *   async charge(@Body() body: { amount: number }, @Idempotency() { execution, writeOnCompletion }: IdempotencyContext<Queryable>) {
 *     const charge = await execution.step('charge', ({ providerKey }) => provider.charge(body, providerKey))
 *     writeOnCompletion(async (tx) => {
 *       await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [charge.id] })
 *     })
 *     return charge
 *   }
 * }
 *
 * @Module({ imports: [IdempotencyModule.forRoot({ engine, scope: (req) => req.get('x-user-id') })], controllers: [ChargesController] })
 * export class AppModule {}
 * ```
 */
export class IdempotencyModule {
  static forRoot<Tx>(options: IdempotencyModuleOptions<Tx>): DynamicModule {
    const { applyToAllRoutes, ...adapterOptions } = options
    const resolved = resolveAdapterOptions(adapterOptions as AdapterOptions<Request, Tx>)
    if (applyToAllRoutes !== undefined && typeof applyToAllRoutes !== 'boolean') throw invalid('applyToAllRoutes', 'must be true or false', applyToAllRoutes)
    return {
      module: IdempotencyModule,
      global: true,
      providers: [
        { provide: IDEMPOTENCY_OPTIONS, useValue: resolved },
        IdempotencyInterceptor,
        ...(applyToAllRoutes === true ? [{ provide: APP_INTERCEPTOR, useExisting: IdempotencyInterceptor }] : []),
      ],
      exports: [IDEMPOTENCY_OPTIONS, IdempotencyInterceptor],
    }
  }
}
Module({})(IdempotencyModule)

/**
 * The parameter decorator that gives a guarded handler its `IdempotencyContext` (its execution,
 * for steps, and `writeOnCompletion`); `undefined` on a request that does not own a key. Type the
 * parameter with your store's transaction: `@Idempotency() idempotency: IdempotencyContext<Queryable>`.
 */
export const Idempotency = createParamDecorator((_data: unknown, context: ExecutionContext) => (context.switchToHttp().getRequest<Request>() as { [CONTEXT]?: IdempotencyContext<unknown> })[CONTEXT])

/** Mirrors Nest's own rule: a handler with `@Res()` or `@Next()`, without `passthrough`, sends its own response. */
function handlesOwnResponse(context: ExecutionContext): boolean {
  const controller = context.getClass()
  const method = context.getHandler().name
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method) ?? {}) as Record<string, unknown>
  const own = Object.keys(args).some((key) => key.startsWith(`${RouteParamtypes.RESPONSE}:`) || key.startsWith(`${RouteParamtypes.NEXT}:`))
  return own && Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method) !== true
}
