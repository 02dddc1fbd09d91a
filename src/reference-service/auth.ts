/**
 * `Authorization: Bearer demo_<userId>`, `userId` a positive integer: the demo's whole
 * authentication. Resolves to the user id as canonical text (no leading zeros), or undefined.
 */
export function userFromAuthorization(header: string | undefined): string | undefined {
  if (header === undefined) return undefined
  const match = /^Bearer +demo_([0-9]{1,15})$/i.exec(header.trim())
  if (!match?.[1]) return undefined
  const id = Number(match[1])
  return id > 0 ? String(id) : undefined
}
