import { IncomingMessage, ServerResponse } from 'node:http'

/**
 * Switches `object` to dictionary properties before an adapter adds its own to it, when its
 * prototype is no longer `ownPrototype`: a request or response whose prototype was swapped, as
 * Express does to both on every request. V8 shares no property transitions of an object whose
 * prototype was set: each property added to it made a hidden class of its own and a copy of its
 * fifty-odd descriptors (about 1.5 KB and a few µs each on Node 20, issue 21), and every later
 * read of it, by Express and node:http too, missed their caches. With dictionary properties an
 * addition is a hash insert and a read a hash lookup: `oncely/express` on a minimal route went
 * from 1.33 M to 0.99 M instructions per request (bench/instructions.ts). An object with its own
 * prototype shares its hidden classes with every other of its kind and is left as it is.
 *
 * Deleting an own property that is not the last one added is what makes V8 switch; `property`, a
 * plain data property of the object's class set in its constructor, is put back at once with its
 * value. Nothing else about the object changes but the place of `property` among its own keys.
 */
function withDictionaryProperties<T extends object>(object: T, ownPrototype: object, property: keyof T & string): void {
  if (Object.getPrototypeOf(object) === ownPrototype) return
  const descriptor = Object.getOwnPropertyDescriptor(object, property)
  if (descriptor === undefined || !('value' in descriptor) || !descriptor.writable || !descriptor.enumerable || !descriptor.configurable) return
  delete object[property]
  ;(object as Record<string, unknown>)[property] = descriptor.value
}

/**
 * A guarded request's request and response, as `oncely/express` and the Nest adapter get them:
 * both switched before anything is added to them (the guard's own properties, and `statusCode`
 * and `statusMessage`, which node:http adds to a response on its first answer: a replay paid for
 * those two as well). A plain node:http pair is left as it is.
 */
export function withDictionaryPropertiesWhenSwapped(req: IncomingMessage, res: ServerResponse): void {
  withDictionaryProperties(req, IncomingMessage.prototype, 'complete')
  withDictionaryProperties(res, ServerResponse.prototype, 'sendDate')
}
